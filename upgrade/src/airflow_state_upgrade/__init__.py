"""Moves airflow-task-state's tables into Airflow 3.3's built-in state store (``airflow-state-upgrade``)."""
