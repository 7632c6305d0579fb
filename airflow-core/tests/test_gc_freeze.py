"""
[state] freeze_gc_after_startup: the API server's heap is collected and frozen as it starts, and
frozen again, without a collection, at the first state request.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from airflow_task_state.api import app as state_app
from airflow_task_state.plugin import LazyStateApp

# Runs in the SQLite pass only: the collector's handling does not depend on the metadata database.
pytestmark = pytest.mark.any_database


@pytest.fixture
def gc_calls(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(state_app.gc, "collect", lambda: calls.append("collect"))
    monkeypatch.setattr(state_app.gc, "freeze", lambda: calls.append("freeze"))
    return calls


def serve(app: LazyStateApp, times: int) -> None:
    """*times* requests for a path the state API does not have (answered 404)."""

    async def requests() -> None:
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        for _ in range(times):
            scope = {
                "type": "http",
                "method": "GET",
                "path": "/nowhere",
                "raw_path": b"/nowhere",
                "root_path": "",
                "query_string": b"",
                "headers": [],
                "scheme": "http",
                "server": ("127.0.0.1", 80),
                "http_version": "1.1",
            }
            await app(scope, receive, send)
        assert sent[0]["status"] == 404

    asyncio.run(requests())


def test_on_by_default_the_first_request_freezes_the_heap_once_without_a_collection(gc_calls):
    serve(LazyStateApp(), 3)
    assert gc_calls == ["freeze"]


def test_off_the_collector_is_left_alone(monkeypatch, gc_calls):
    monkeypatch.setenv("AIRFLOW__STATE__FREEZE_GC_AFTER_STARTUP", "False")
    serve(LazyStateApp(), 2)
    assert gc_calls == []


def test_after_the_real_freeze_garbage_made_later_is_still_collected():
    """
    What makes it safe for the rest of the API server: only what start-up made is out of reach, and
    nothing of it was garbage; the collector goes on collecting what every later request makes,
    cycles included, by itself.
    """

    class Node:
        pass

    before = gc.get_freeze_count()
    try:
        state_app.freeze_heap_at_start()
        assert gc.get_freeze_count() > before and gc.isenabled()
        made_later = []
        for _ in range(10_000):
            node = Node()
            node.itself = node  # a cycle: only the collector frees it
            made_later.append(weakref.ref(node))
        del node
        alive = sum(ref() is not None for ref in made_later)
        assert alive < 1_000, f"{alive} of 10,000 cycles made after the freeze were never collected"
    finally:
        gc.unfreeze()


def test_the_api_server_builds_the_state_api_and_collects_as_it_starts(monkeypatch, gc_calls):
    """
    Airflow's own app, as `airflow api-server` serves it: its start (the lifespan) makes the
    plugin's root middleware, which builds the state API, then collects and freezes the heap, before
    any request reaches it: the first task to touch state after a start waits for neither. The first
    state request freezes again, without a collection: what Airflow built for its own first requests
    (its DAG bag, its caches) is frozen too. Airflow's routes pass through untouched.
    """
    import time

    from airflow.api_fastapi.app import create_app
    from airflow_task_state import plugin
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-test-secret-of-airflows-own-tokens")
    monkeypatch.setattr(plugin.STATE_API, "_app", None)
    monkeypatch.setattr(plugin.STATE_API, "_serving", False)
    with TestClient(create_app()) as airflow_api:
        deadline = time.monotonic() + 60
        while len(gc_calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert plugin.STATE_API._app is not None, "the state API was not built as the API server started"
        assert gc_calls == ["collect", "freeze"], "the heap was not collected and frozen as it started"
        assert airflow_api.get("/api/v2/version").status_code == 200
        assert gc_calls == ["collect", "freeze"]
        assert airflow_api.get("/state/openapi.json").status_code == 200
        assert airflow_api.get("/state/openapi.json").status_code == 200
    assert gc_calls == ["collect", "freeze", "freeze"]
