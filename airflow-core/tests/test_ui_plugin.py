"""The UI part of the plugin, in process: its two React apps and the files the state API serves for them."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

# Runs in the SQLite pass only: the UI files and their registration do not depend on the metadata database.
pytestmark = pytest.mark.any_database


@pytest.fixture(scope="module")
def client():
    from airflow_task_state.api.app import create_app

    with TestClient(create_app()) as client:
        yield client


def test_plugin_registers_the_task_instance_tab_and_the_navigation_page():
    from airflow.api_fastapi.core_api.datamodels.plugins import ReactAppResponse
    from airflow_task_state.plugin import UI_APP_NAME, TaskStatePlugin

    apps = {app["destination"]: app for app in TaskStatePlugin.react_apps}
    assert set(apps) == {"task_instance", "nav"}
    for app in apps.values():
        # Airflow's /api/v2/plugins validates every app; one invalid entry hides the whole plugin.
        ReactAppResponse.model_validate(app)
        assert app["name"] == UI_APP_NAME
        assert app["bundle_url"] == "/state/ui/state.js"
        assert app["icon"] == "/state/ui/state.svg"
        assert app["icon_dark_mode"] == "/state/ui/state-dark.svg"
    assert apps["task_instance"]["url_route"] == "task-state"
    assert apps["nav"]["url_route"] == "state"
    assert apps["nav"]["category"] == "browse"


def test_the_module_registers_the_apps_name():
    from airflow_task_state.api.ui.static import _read
    from airflow_task_state.plugin import UI_APP_NAME

    # Airflow 3.2's UI renders globalThis[<app name>]: the module must set exactly that name.
    assert f"globalThis.{UI_APP_NAME} = " in _read("state.js")[0].decode()


def test_bundle_url_follows_the_base_url_path(monkeypatch):
    from airflow_task_state.plugin import state_react_apps

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/team-a/")
    assert {app["bundle_url"] for app in state_react_apps()} == {"/team-a/state/ui/state.js"}
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert {app["bundle_url"] for app in state_react_apps()} == {"/state/ui/state.js"}


@pytest.mark.parametrize(
    ("name", "media_type"),
    [("state.js", "text/javascript"), ("state.svg", "image/svg+xml"), ("state-dark.svg", "image/svg+xml")],
)
def test_ui_files_are_served_with_their_media_type(client, name, media_type):
    response = client.get(f"/ui/{name}")
    assert response.status_code == 200
    # Browsers refuse a module script of any other type.
    assert response.headers["content-type"].split(";")[0] == media_type
    assert response.headers["cache-control"] == "no-cache"
    again = client.get(f"/ui/{name}", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304


def test_only_the_ui_files_are_served(client):
    assert client.get("/ui/static.py").status_code == 404
    assert client.get("/ui/..%2Fapp.py").status_code == 404
