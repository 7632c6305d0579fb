"""The task-facing state API, served by the Airflow API server under ``/state``."""
