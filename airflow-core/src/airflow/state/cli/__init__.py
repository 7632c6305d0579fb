"""The `airflow state-db` commands: definitions Airflow reads at start-up, commands loaded lazily."""
