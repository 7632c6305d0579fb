"""Airflow's own metadata database as the rest of the package reads it (not the default storage)."""
