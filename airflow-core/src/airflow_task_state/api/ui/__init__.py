"""The State tab and page of Airflow's UI: a React app the plugin registers, served by the state API."""
