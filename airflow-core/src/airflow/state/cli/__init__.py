"""
The `airflow state` and `airflow state-db` commands: definitions Airflow reads at start-up
(``definition``, ``state_definition``), commands loaded lazily when run.
"""
