# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
[state] serve_task_requests_first: on Airflow's own app, as `airflow api-server` serves it, task
code's state requests reach the state API before Airflow's middleware; every other request,
the state API's operator routes included, goes through it as before.
"""

from __future__ import annotations

import uuid

import pytest
from airflow.api_fastapi.common import http_access_log
from test_state_api import (  # noqa: F401 (fixtures)
    auth,
    exercise_ti,
    resolved_by_fastapi,
    running,
    session_key,
)

# Runs in the SQLite pass (and on Airflow 3.3): how Airflow's app routes does not depend on the database.
pytestmark = pytest.mark.any_database

TASK_VALUE = f"/state/task-instances/{uuid.uuid4()}/value?key=job"


@pytest.fixture
def through_airflows_middleware(monkeypatch):
    """The paths of the requests that went through Airflow's middleware (its access log, outermost)."""
    paths: list[str] = []
    passed_on = http_access_log.HttpAccessLogMiddleware.__call__

    async def logged(self, scope, receive, send):
        if scope["type"] == "http":
            paths.append(scope["path"])
        await passed_on(self, scope, receive, send)

    monkeypatch.setattr(http_access_log.HttpAccessLogMiddleware, "__call__", logged)
    return paths


@pytest.fixture(params=["", "/airflow"], ids=["at the root", "below [api] base_url's path"])
def root(request, monkeypatch):
    """Where Airflow's app is served: its root path, from ``[api] base_url`` (read as it is imported)."""
    from airflow.api_fastapi import app

    monkeypatch.setattr(app, "API_ROOT_PATH", request.param + "/")
    return request.param


@pytest.fixture
def airflow_api(monkeypatch, root):
    """A client of Airflow's whole app, started (its lifespan) as the API server starts it."""
    from airflow.api_fastapi.app import create_app
    from airflow_task_state import plugin
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-test-secret-of-airflows-own-tokens")
    monkeypatch.setenv("AIRFLOW__STATE__FREEZE_GC_AFTER_STARTUP", "False")
    monkeypatch.setattr(plugin.STATE_API, "_serving", False)

    def started():
        return TestClient(create_app(), base_url=f"http://testserver{root}", root_path=root)

    return started


def raw_get(app, path: str, root: str) -> int:
    """The status of a GET of *path* exactly as written, sent to *app* as a server would."""
    import asyncio

    statuses = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": root,
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1),
    }
    asyncio.run(app(scope, receive, send))
    return statuses[0]


def refused_for_its_credential(response) -> bool:
    # The state API's own refusal: the request reached it, and it asked for the task's credential.
    return response.status_code == 401 and "credential" in response.json()["detail"]["message"]


def test_task_requests_skip_airflows_middleware_and_every_other_request_keeps_it(
    root, airflow_api, through_airflows_middleware
):
    with airflow_api() as client:
        assert refused_for_its_credential(client.get(TASK_VALUE))
        assert refused_for_its_credential(client.put(TASK_VALUE, json={"value": 1}))
        assert refused_for_its_credential(client.get("/state/assets/keys?name=a"))
        assert client.post("/state/credentials", json={}).status_code == 422
        # A path that only starts like a task route reaches no operator route by the fork: the
        # state API routes it literally, with no `..` resolved (sent raw: httpx would resolve it).
        assert raw_get(client.app, root + "/state/task-instances/../api/v1/assets", root) == 404
        assert through_airflows_middleware == []

        assert client.get("/api/v2/version").status_code == 200
        assert client.get("/state/openapi.json").status_code == 200
        # The operator API answers people with Airflow's session: Airflow's middleware stays.
        assert client.get("/state/api/v1/assets").status_code in (401, 403)
        kept = ["/api/v2/version", "/state/openapi.json", "/state/api/v1/assets"]
        assert through_airflows_middleware == [root + path for path in kept]


def test_off_task_requests_go_through_airflows_middleware(
    monkeypatch, root, airflow_api, through_airflows_middleware
):
    monkeypatch.setenv("AIRFLOW__STATE__SERVE_TASK_REQUESTS_FIRST", "False")
    with airflow_api() as client:
        assert refused_for_its_credential(client.get(TASK_VALUE))
        assert through_airflows_middleware == [root + TASK_VALUE.partition("?")[0]]


@pytest.mark.parametrize("first", ["True", "False"], ids=["task requests first", "fork off"])
def test_a_tasks_plain_requests_on_airflows_app_are_served_before_the_state_apps_routing(
    monkeypatch, first, airflow_api, session_key, running, resolved_by_fastapi
):
    """
    Mounted in Airflow's app, below its root path or not, through the fork or through Airflow's
    middleware: a task's plain get and set are served before the state API's routing, and a request
    naming another task instance still reaches the route, which refuses it.
    """
    monkeypatch.setenv("AIRFLOW__STATE__SERVE_TASK_REQUESTS_FIRST", first)
    url, headers = f"/state/task-instances/{running.ti_id}/value", auth(running)
    with airflow_api() as client:
        written = client.put(url, params={"key": "mounted"}, json={"value": 1}, headers=headers)
        assert written.status_code == 200 and written.json()["key"] == "mounted"
        assert client.get(url, params={"key": "mounted"}, headers=headers).json()["value"] == 1
        assert resolved_by_fastapi == []
        another = f"/state/task-instances/{uuid.uuid4()}/value"
        refused = client.get(another, params={"key": "mounted"}, headers=headers)
        assert refused.status_code == 403 and len(resolved_by_fastapi) == 1
