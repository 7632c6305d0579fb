"""The operators' REST API (``/state/api/v1``), authorized by Airflow's own auth manager."""
