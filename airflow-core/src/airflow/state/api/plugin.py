"""Mounts the state API on the Airflow API server (entry point ``airflow.plugins``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin
from airflow.state.api.app import LazyStateApp
from airflow.state.protocol import URL_PREFIX
from airflow.state.worker import listener as clear_on_success_listener

#: The name of both React apps: the task instance tab's label and the navigation entry's. Airflow
#: 3.2's UI finds an app's component at ``globalThis[name]``, so ``state.js`` registers this name.
UI_APP_NAME = "State"


def ui_path() -> str:
    """
    The absolute path of the state UI's files, under ``[api] base_url``'s path.

    Airflow 3.2.1's UI resolves a relative ``bundle_url`` against its own script's URL
    (``/static/assets/``), not against the page, so the URL must be root-absolute and carry the
    deployment's path prefix when the API server is served under one.
    """
    from airflow.configuration import conf

    base_path = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base_path}{URL_PREFIX}/ui"


def state_react_apps() -> list[dict[str, Any]]:
    """The State tab of the task instance page and the State page of the Browse menu."""
    ui = ui_path()
    common = {
        "name": UI_APP_NAME,
        "bundle_url": f"{ui}/state.js",
        "icon": f"{ui}/state.svg",
        "icon_dark_mode": f"{ui}/state-dark.svg",
    }
    # url_route must be unique among all plugins' views and apps (Airflow drops clashing ones).
    return [
        {**common, "destination": "task_instance", "url_route": "task-state"},
        {**common, "destination": "nav", "category": "browse", "url_route": "state"},
    ]


class TaskStatePlugin(AirflowPlugin):
    name = "task_state"
    fastapi_apps = [{"app": LazyStateApp(), "url_prefix": URL_PREFIX, "name": "Task state API"}]
    react_apps = state_react_apps()
    # Clears a task instance's state when its try succeeds, if configured (runs in task processes).
    listeners = [clear_on_success_listener]
