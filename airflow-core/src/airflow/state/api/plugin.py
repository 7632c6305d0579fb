"""Mounts the state API on the Airflow API server (entry point ``airflow.plugins``)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from airflow.state.api.app import LazyStateApp
from airflow.state.protocol import URL_PREFIX


class TaskStatePlugin(AirflowPlugin):
    name = "task_state"
    fastapi_apps = [{"app": LazyStateApp(), "url_prefix": URL_PREFIX, "name": "Task state API"}]
