"""
The operators' REST API (``/state/api/v1``): read and fix task and asset state, authenticated and
authorized by Airflow's own auth manager, exactly like Airflow's public REST API.
"""
