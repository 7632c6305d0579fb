"""Example DAGs for task and asset state; point ``[core] dags_folder`` here to try them."""
