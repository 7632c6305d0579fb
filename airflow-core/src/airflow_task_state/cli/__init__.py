"""`airflow state` and `airflow state-db`: ``definition``, read at start-up, and the commands it loads."""
