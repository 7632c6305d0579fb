"""
The `airflow state` and `airflow state-db` commands: ``definition``, read by Airflow at start-up,
and the command modules it names, loaded lazily when a command runs.
"""
