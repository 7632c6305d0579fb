"""The metastore on Airflow 3.3: Airflow's own state-store tables, and what they lack beside them."""
