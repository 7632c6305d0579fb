"""What task code is told when something is wrong, before or instead of a round trip."""

from __future__ import annotations

import httpx
import pytest
from airflow_task_state import (
    StateError,
    StateOutcomeUnknownError,
    StateUnavailableError,
    asset_state,
    codec,
    config,
    task_state,
)
from airflow_task_state.worker import client
from airflow_task_state.worker.client import StateClient

# Runs in the SQLite pass only: these refusals happen in the task, before any request.
pytestmark = pytest.mark.any_database

# What the client reads of the running task instance to speak for it: its id.
TI = type("RuntimeTaskInstance", (), {"id": "01234567-89ab-7def-8123-456789abcdef"})()


@pytest.mark.parametrize(
    "call", [lambda: task_state.get("k"), lambda: task_state.set("k", 1), task_state.keys]
)
def test_outside_a_task_says_where_it_can_be_used(call):
    with pytest.raises(RuntimeError, match="can only be used inside a running Airflow task"):
        call()


def test_asset_state_takes_an_asset_a_name_or_a_uri():
    with pytest.raises(TypeError, match="takes an Asset"):
        asset_state[42]
    with pytest.raises(RuntimeError, match="inside a running Airflow task"):
        asset_state["orders"].get("watermark")


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (None, ValueError, "cannot be None"),
        (float("nan"), ValueError, "NaN and Infinity"),
        ({"a": [float("-inf")]}, ValueError, "NaN and Infinity"),
        ({1, 2}, TypeError, "JSON-serialisable"),
        ("x" * 100, ValueError, r"limit is 64 \(\[state\] max_value_bytes\)"),
    ],
)
def test_values_are_checked_in_the_task(value, error, message):
    with pytest.raises(error, match=message):
        codec.encode(value, limit=64)


def test_values_round_trip_as_compact_json():
    document = {"ü": [1, 2.5, True, None], "s": ""}
    assert codec.decode(codec.encode(document, limit=100)) == document


def test_api_url_defaults_from_the_execution_api(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://api:8080/execution/")
    assert config.api_url() == "http://api:8080/state"
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "https://state.example/state/")
    assert config.api_url() == "https://state.example/state"


def test_unreachable_api_is_retried_as_airflow_retries_then_explained(monkeypatch):
    from state_testing.dbservers import free_port

    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRIES", "3")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", "0.01")
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", f"http://127.0.0.1:{free_port()}/state")
    monkeypatch.setattr(client, "_credentials", {})  # this process holds no credential yet
    # Its supervisor has written the proof (see test_handshake.py for that part).
    from airflow_task_state.worker import handshake

    monkeypatch.setattr(handshake, "_send", lambda ti, fields: None)
    monkeypatch.setattr(handshake, "_rendered_fields", lambda ti: {})
    attempts = []
    send = httpx.Client.send
    monkeypatch.setattr(
        httpx.Client,
        "send",
        lambda self, r, **kw: attempts.append((r.method, r.url.path)) or send(self, r, **kw),
    )
    with pytest.raises(
        StateUnavailableError, match=r"Cannot reach the task state API .* check \[state\] api_url"
    ) as raised:
        StateClient(TI).request("GET", "/task-instances/x/keys")
    # The first call of the process carries the try's proof: that request is retried.
    assert attempts == [("GET", "/state/task-instances/x/keys")] * 4
    assert type(raised.value) is StateUnavailableError and isinstance(raised.value, StateError)


def test_retry_waits_follow_the_workers_settings():
    from airflow_task_state.config import RetryPolicy

    policy = RetryPolicy(retries=5, wait_min=1.0, wait_max=10.0)
    waits = [policy.wait(attempt) for attempt in range(policy.retries)]
    for wait, base in zip(waits, [1, 2, 4, 8, 10], strict=True):
        assert base <= wait <= base * 1.25
    # Airflow's defaults (5 retries, 1 s to 90 s) outlast an API server restart of 8 to 17 s.
    default = RetryPolicy.from_config()
    assert (default.retries, default.wait_min, default.wait_max) == (5, 1.0, 90.0)
    assert sum(default.wait(attempt) for attempt in range(default.retries)) >= 31


def test_an_undeclared_asset_is_refused_in_the_task_as_access_denied():
    from types import SimpleNamespace

    from airflow.sdk import Asset
    from airflow_task_state import StateAccessDeniedError
    from airflow_task_state.worker.accessors import _declared_asset

    declared = Asset(name="orders", uri="s3://bucket/orders")
    ti = SimpleNamespace(task_id="t", task=SimpleNamespace(inlets=[declared], outlets=[]))
    assert _declared_asset(ti, "orders") == ("orders", "s3://bucket/orders")
    with pytest.raises(StateAccessDeniedError, match="does not declare this asset") as raised:
        _declared_asset(ti, "customers")
    assert isinstance(raised.value, PermissionError)  # what task code written before still catches


# --- versions, ttl, increments ---------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl", "error", "message"),
    [
        (0, ValueError, "ttl must be positive"),
        (-3.5, ValueError, "ttl must be positive"),
        (float("inf"), ValueError, "ttl must be positive"),
        ("forever", ValueError, "NEVER_EXPIRES"),
        (True, TypeError, "ttl must be a timedelta"),
        ([60], TypeError, "ttl must be a timedelta"),
    ],
)
def test_a_wrong_ttl_is_refused_in_the_task_before_any_request(ttl, error, message):
    # Outside a task: the ttl is checked first, so the error is about the ttl, not about the task.
    with pytest.raises(error, match=message):
        task_state.set("k", 1, ttl=ttl)
    with pytest.raises(error, match=message):
        task_state.increment("k", ttl=ttl)


def test_ttls_as_the_api_takes_them():
    from datetime import timedelta

    from airflow_task_state import NEVER_EXPIRES
    from airflow_task_state.worker.options import ttl_field

    assert ttl_field(None) is None
    assert ttl_field(NEVER_EXPIRES) == "never"
    assert ttl_field(timedelta(minutes=2)) == 120.0
    assert ttl_field(1.5) == 1.5


def test_a_non_idempotent_request_is_retried_only_if_it_never_reached_the_server(monkeypatch):
    """A lost answer to an increment must not make the client send it again: it could count twice."""
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRIES", "3")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", "0.01")
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://state.invalid/state")
    sent = []

    def lose_the_answer(self, request, **kwargs):
        sent.append(request.method)
        raise httpx.ReadError("connection reset while reading the answer")

    monkeypatch.setattr(httpx.Client, "send", lose_the_answer)
    state_client = StateClient(TI)
    with pytest.raises(StateUnavailableError, match="may or may not have been applied"):
        state_client._send("POST", "/task-instances/x/increment", idempotent=False)
    assert sent == ["POST"]
    # An idempotent one (a plain PUT) is retried as Airflow retries; every answer lost, it may
    # have been applied all the same, and the error says so.
    with pytest.raises(StateOutcomeUnknownError, match="an earlier attempt may have reached the server"):
        state_client._send("PUT", "/task-instances/x/value")
    assert sent == ["POST"] + ["PUT"] * 4

    def refuse_connection(self, request, **kwargs):
        sent.append(request.method)
        raise httpx.ConnectError("connection refused")

    sent.clear()
    monkeypatch.setattr(httpx.Client, "send", refuse_connection)
    with pytest.raises(StateUnavailableError, match="Cannot reach"):
        state_client._send("POST", "/task-instances/x/increment", idempotent=False)
    assert sent == ["POST"] * 4  # never sent: safe to try again
