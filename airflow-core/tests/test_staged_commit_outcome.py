# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
A staged-writes commit whose reply is lost, then retried against an API server that is restarting
or whose database is failing over: the task log must not say "NONE of them was applied", since the
server may have applied it (it did here), and a user told so might re-apply increments by hand.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import types
import uuid
from collections.abc import Iterator

import httpx
import pytest
from airflow_shared.state import StagedOp
from airflow_task_state.worker import client, listener, staging
from airflow_task_state.worker.staging import Staged
from test_state_api import api, exercise_ti, session_key  # noqa: F401 (fixtures)

_FAST_RETRIES = {
    "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "2",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "0.01",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "0.02",
}


def _succeed_after_staging(ti, monkeypatch, caplog) -> logging.LogRecord:
    """
    Stage an increment of ``rows_loaded`` by 100 in *ti*'s try, end the try successfully (the
    listener's hook commits), and return what the hook logged about the commit.
    """
    staging.begin(ti)
    staging.stage(ti, None, "rows_loaded", Staged(StagedOp.INCREMENT, by=100), "task_state.stage_increment")
    # What the task runner would say: this is the task process, and the task does not clear on success.
    monkeypatch.setattr(listener, "_in_task_process", lambda task_instance: True)
    monkeypatch.setattr(listener, "wants_clear", lambda task: False)
    monkeypatch.setattr(listener.handshake, "withdraw", lambda task_instance: None)
    with caplog.at_level(logging.INFO, logger=listener.log.name):
        listener._try_ended(ti, succeeded=True)
    told = [record for record in caplog.records if "ommit" in record.getMessage()]
    assert told, "the listener said nothing about the commit"
    return told[-1]


def _assert_not_reported_as_never_applied(told: logging.LogRecord) -> None:
    text = told.getMessage()
    assert "NONE of them was applied" not in text, (
        "the server applied the commit, but the task log says none of it was: " + text
    )
    assert "for certain" in text, text


@pytest.mark.any_database
def test_a_commit_that_may_have_been_applied_is_not_reported_as_never_applied(monkeypatch, caplog):
    for name, value in _FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://state-api.test/state")
    applied = []

    def server(request: httpx.Request) -> httpx.Response:
        if not applied:
            applied.append(request.content)  # the commit is applied, then its reply is lost
            raise httpx.ReadTimeout("reply lost", request=request)
        raise httpx.ConnectError("the API server is restarting", request=request)

    ti = types.SimpleNamespace(id=uuid.uuid4(), task_id="counting", task=types.SimpleNamespace())
    state_client = client.StateClient(ti)
    http = httpx.Client(base_url=state_client.base_url, transport=httpx.MockTransport(server))
    monkeypatch.setitem(client._clients, (os.getpid(), state_client.base_url, False), http)
    far = time.monotonic() + 3600
    monkeypatch.setitem(client._credentials, (os.getpid(), str(ti.id)), client._Credential("t", far, far))

    told = _succeed_after_staging(ti, monkeypatch, caplog)

    assert applied, "the server never saw the commit"
    _assert_not_reported_as_never_applied(told)


# --- the same for real: the network loses a real API server's reply, then the database fails over ---


@contextlib.contextmanager
def _served(app) -> Iterator[int]:
    """*app* served by uvicorn, as Airflow's API server serves it, on a port of its own."""
    import uvicorn
    from state_testing.dbservers import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="state-api-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.skipif(
    "config.getoption('--db') == 'sqlite'",
    reason="SQLite has no server to fail over: the API never answers 503 database_unavailable",
)
def test_a_commit_whose_reply_is_lost_then_answered_503_has_an_unknown_outcome(
    api, exercise_ti, monkeypatch, caplog
):
    """
    The commit reaches a real API server, which applies it; a proxy between them loses the reply.
    The database then fails over: every retry is answered 503 ``database_unavailable``. That last
    answer says nothing about the first attempt: the outcome is unknown, never "NONE applied".
    """
    from airflow_shared.state import commit_records_scope
    from airflow_task_state import StateOutcomeUnknownError, get_state_backend, task_scope
    from airflow_task_state.api.credentials import issue_credential
    from airflow_task_state.api.signing_keys import signing_key
    from state_testing.proxy import DroppingProxy, autocommit_engine_through_a_proxy

    claims = exercise_ti  # its try succeeded: it may commit
    scope = task_scope(claims.dag_id, claims.run_id, claims.task_id, claims.map_index)
    backend = get_state_backend()
    backend.delete(scope, "rows_loaded")
    backend.delete(commit_records_scope(scope), claims.ti_id)  # no commit of this try applied yet
    for name, value in _FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    # Long enough for the database to be gone before the first retry (see fail_over below).
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", "0.5")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX", "0.6")
    monkeypatch.setattr(client, "_clients", {})
    far = time.monotonic() + 3600
    credential = client._Credential(issue_credential(claims, signing_key()), far, far)
    monkeypatch.setattr(client, "_credentials", {(os.getpid(), claims.ti_id): credential})
    ti = types.SimpleNamespace(
        id=uuid.UUID(claims.ti_id), task_id=claims.task_id, task=types.SimpleNamespace()
    )

    with autocommit_engine_through_a_proxy() as database, _served(api.app) as port:
        network = DroppingProxy("127.0.0.1", port)
        monkeypatch.setenv("AIRFLOW__STATE__API_URL", f"http://127.0.0.1:{network.port}")

        def fail_over() -> None:
            # Once the reply is lost, the database takes no more connections: the API server
            # answers each retry 503 database_unavailable (the test run connects per statement).
            network.dropped.wait(timeout=60)
            database.close()

        threading.Thread(target=fail_over, name="fail-over", daemon=True).start()
        network.arm(b"/staged/commit")
        try:
            told = _succeed_after_staging(ti, monkeypatch, caplog)
        finally:
            network.close()
        assert network.dropped.is_set(), "the proxy never lost the commit's reply"

    try:
        assert int(backend.get(scope, "rows_loaded")) == 100, "the first attempt was not applied"
        _assert_not_reported_as_never_applied(told)
        assert told.exc_info is not None
        error = told.exc_info[1]
        assert isinstance(error, StateOutcomeUnknownError), repr(error)
        assert "503 database_unavailable" in str(error), error  # the retries met the failover
    finally:
        backend.delete(scope, "rows_loaded")
        backend.delete(commit_records_scope(scope), claims.ti_id)


# --- what the API server knows of a write whose database reply was lost ---


def _client_for(server, monkeypatch) -> client.StateClient:
    """A StateClient of a fresh task instance that talks to *server* (an httpx handler) with a credential."""
    for name, value in _FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://state-api.test/state")
    ti = types.SimpleNamespace(id=uuid.uuid4(), task_id="counting", task=types.SimpleNamespace())
    state_client = client.StateClient(ti)
    http = httpx.Client(base_url=state_client.base_url, transport=httpx.MockTransport(server))
    monkeypatch.setitem(client._clients, (os.getpid(), state_client.base_url, False), http)
    far = time.monotonic() + 3600
    monkeypatch.setitem(client._credentials, (os.getpid(), str(ti.id)), client._Credential("t", far, far))
    return state_client


def _unavailable(*, outcome_unknown: bool = False) -> httpx.Response:
    detail = {"reason": "database_unavailable", "message": "the metadata database cannot be reached"}
    if outcome_unknown:
        detail["outcome_unknown"] = True
    return httpx.Response(503, json={"detail": detail})


@pytest.mark.any_database
def test_a_write_the_database_never_ran_is_sent_again_even_an_increment(monkeypatch):
    """A 503 database_unavailable without outcome_unknown says the write was not applied: an
    increment during a database restart is sent again, not reported as of unknown outcome."""
    answers = iter([_unavailable(), httpx.Response(200, json={"value": 1})])
    sent = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return next(answers)

    state_client = _client_for(server, monkeypatch)
    response = state_client.request("POST", "/task-instances/x/increment", idempotent=False, json={"by": 1})
    assert (response.status_code, len(sent)) == (200, 2)


@pytest.mark.any_database
def test_a_write_whose_database_reply_was_lost_has_an_unknown_outcome_whatever_later_attempts_answer(
    monkeypatch,
):
    from airflow_task_state import StateOutcomeUnknownError

    answers = iter([_unavailable(outcome_unknown=True), _unavailable(), _unavailable()])
    state_client = _client_for(lambda request: next(answers), monkeypatch)
    with pytest.raises(StateOutcomeUnknownError, match="may or may not have been applied"):
        state_client.request("POST", "/task-instances/x/staged/commit", json={})
    # Not idempotent: not sent again at all.
    answers = iter([_unavailable(outcome_unknown=True)])
    with pytest.raises(StateOutcomeUnknownError, match="may or may not have been applied"):
        state_client.request("POST", "/task-instances/x/increment", idempotent=False, json={"by": 1})


@pytest.mark.skipif(
    "config.getoption('--db') == 'sqlite'",
    reason="SQLite has no server whose reply can be lost",
)
def test_a_commit_whose_database_reply_is_lost_then_answered_503_has_an_unknown_outcome(
    api, exercise_ti, monkeypatch, caplog
):
    """
    The API server sends the commit's COMMIT, the database commits it, and the reply is lost
    between them; the database then fails over, so every retry is answered 503. The API server's
    first answer says the outcome is unknown, and the task's log must not say "NONE applied".
    """
    from airflow_shared.state import commit_records_scope
    from airflow_task_state import StateOutcomeUnknownError, get_state_backend, task_scope
    from airflow_task_state.api.credentials import issue_credential
    from airflow_task_state.api.signing_keys import signing_key
    from state_testing.proxy import airflow_sessions_through_a_proxy

    claims = exercise_ti
    scope = task_scope(claims.dag_id, claims.run_id, claims.task_id, claims.map_index)
    backend = get_state_backend()
    backend.delete(scope, "rows_loaded")
    backend.delete(commit_records_scope(scope), claims.ti_id)  # no commit of this try applied yet
    for name, value in _FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(client, "_clients", {})
    far = time.monotonic() + 3600
    credential = client._Credential(issue_credential(claims, signing_key()), far, far)
    monkeypatch.setattr(client, "_credentials", {(os.getpid(), claims.ti_id): credential})
    ti = types.SimpleNamespace(
        id=uuid.UUID(claims.ti_id), task_id=claims.task_id, task=types.SimpleNamespace()
    )

    with airflow_sessions_through_a_proxy() as database, _served(api.app) as port:
        monkeypatch.setenv("AIRFLOW__STATE__API_URL", f"http://127.0.0.1:{port}")

        def fail_over() -> None:
            database.dropped.wait(timeout=60)
            database.close()

        threading.Thread(target=fail_over, name="fail-over", daemon=True).start()
        database.arm(b"COMMIT")
        told = _succeed_after_staging(ti, monkeypatch, caplog)
        assert database.dropped.is_set(), "the proxy never lost the COMMIT's reply"

    try:
        assert int(backend.get(scope, "rows_loaded")) == 100, "the database did not commit it"
        _assert_not_reported_as_never_applied(told)
        assert told.exc_info is not None
        assert isinstance(told.exc_info[1], StateOutcomeUnknownError), repr(told.exc_info[1])
    finally:
        backend.delete(scope, "rows_loaded")
        backend.delete(commit_records_scope(scope), claims.ti_id)
