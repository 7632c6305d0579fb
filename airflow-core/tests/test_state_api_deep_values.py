# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""The task API: a value the task may write, it can read back (one nested too deep is refused first)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from test_state_api import api, at, auth, exercise_ti, running, session_key  # noqa: F401 (fixtures)


def test_a_deeply_nested_value_the_task_wrote_reads_back(api, running):
    client = TestClient(api.app, raise_server_exceptions=False)
    headers = auth(running)
    nested = json.loads("[" * 300 + "]" * 300)
    written = client.put(**at(running, "deep"), json={"value": nested}, headers=headers)
    assert written.status_code == 422, written.text[:200]
    assert written.json()["detail"]["reason"] == "invalid_value"
    assert "levels deep" in written.json()["detail"]["message"]
    assert client.get(**at(running, "deep"), headers=headers).status_code == 404  # nothing stored
