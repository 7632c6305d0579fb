"""
What stage() accepts fits in the commit's body: were the size undercounted (it was, by a byte per
key), a try could stage writes the commit cannot send, and the API server would refuse the body
past [state] max_batch_bytes after the try succeeded, losing every staged write.
"""

from __future__ import annotations

import json
import types
import uuid

import pytest
from airflow_shared.state import MAX_MANY_KEYS, StagedOp
from airflow_task_state import config
from airflow_task_state.worker import client, staging
from airflow_task_state.worker.staging import Staged

pytestmark = pytest.mark.any_database


def test_what_stage_accepts_fits_in_the_commit_body(monkeypatch):
    monkeypatch.setattr(staging, "_hold_credential", lambda ti: None)  # no API server here
    monkeypatch.setattr(staging, "_warn_at_exit", lambda: None)
    ti = types.SimpleNamespace(id=uuid.uuid4())
    limit = config.max_batch_bytes()
    # Every value stays a small one (inline in the commit's body), however much room is left.
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", str(limit))
    staging.begin(ti)
    held = staging._by_try[str(ti.id)]
    keys = [f"part_{n:04d}" for n in range(MAX_MANY_KEYS)]
    per_key = limit // MAX_MANY_KEYS - 200  # leave room for each entry's envelope
    for key in keys[:-1]:
        staging.stage(ti, None, key, Staged(StagedOp.SET, json.dumps("x" * per_key)), "task_state.stage")
    # The last value takes exactly what stage() says is left.
    counted = sum(held.sizes.values()) + staging._ENVELOPE_BYTES
    probe = Staged(StagedOp.SET, json.dumps(""))
    room = limit - counted - (len(probe.entry(None, keys[-1]).encode()) + 1)
    assert room > 0
    staging.stage(ti, None, keys[-1], Staged(StagedOp.SET, json.dumps("x" * room)), "task_state.stage")

    sent = {}

    def request(self, method, path, **kwargs):
        sent["bytes"] = len(kwargs["content"])
        return types.SimpleNamespace(json=lambda: {"applied": True})

    monkeypatch.setattr(client.StateClient, "request", request)
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://state-api.test/state")
    staging.commit(ti)
    assert sent["bytes"] <= limit, (
        f"stage() accepted writes whose commit body is {sent['bytes']} bytes; the API server refuses "
        f"anything past [state] max_batch_bytes = {limit}, so all {MAX_MANY_KEYS} staged writes are lost"
    )
