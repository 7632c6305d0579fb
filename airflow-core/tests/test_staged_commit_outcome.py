"""
A staged-writes commit whose reply is lost, then retried against an API server that is restarting:
the task log must not say "NONE of them was applied", since the server may have applied it (it
did here), and a user told so might re-apply increments by hand.
"""

from __future__ import annotations

import logging
import os
import time
import types
import uuid

import httpx
import pytest
from airflow.state.worker import client, listener, staging
from airflow.state.worker.staging import Staged
from airflow_shared.state import StagedOp

pytestmark = pytest.mark.any_database


def test_a_commit_that_may_have_been_applied_is_not_reported_as_never_applied(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRIES", "2")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", "0.01")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX", "0.02")
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
    staging.begin(ti)
    staging.stage(ti, None, "rows_loaded", Staged(StagedOp.INCREMENT, by=100), "task_state.stage_increment")
    monkeypatch.setattr(listener, "_in_task_process", lambda task_instance: True)
    monkeypatch.setattr(listener, "wants_clear", lambda task: False)
    monkeypatch.setattr(listener.handshake, "withdraw", lambda task_instance: None)

    with caplog.at_level(logging.INFO, logger=listener.log.name):
        listener._try_ended(ti, succeeded=True)

    assert applied, "the server never saw the commit"
    told = caplog.text
    assert "Could not commit" in told, told
    assert "NONE of them was applied" not in told, (
        "the server applied the commit, but the task log says none of it was: " + told[-600:]
    )
