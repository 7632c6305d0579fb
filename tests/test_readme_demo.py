"""The README's first command tells the story it promises, on a real deployment."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]


def test_demo_shows_the_crash_the_retry_the_reconnect_and_the_state_kept(db_kind):
    if db_kind != "sqlite":
        pytest.skip("the demo runs on the embedded default, SQLite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    demo = str(REPO / "dev" / "demo")
    result = subprocess.run([demo], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    out = result.stdout
    assert "[state] backend = airflow_task_state.metastore.MetastoreStateBackend" in out
    job = re.search(r"attempt=1: Submitted job (app_\w+)", out).group(1)
    assert "attempt=1: Simulating a worker crash: SIGKILL" in out
    assert f"attempt=2: Reconnecting to job {job}" in out
    assert f"task finished on try 2; remote jobs ever submitted: 1 ['{job}']" in out
    assert f'task_state: remote_job_id = "{job}" (written by try 1)' in out
    assert "remote jobs ever submitted: 2" in out
    assert "process[1]: offset = 1000" in out
    assert 'crawl: checkpoint = {"page":3}' in out
    assert "after watermark_2: asset 'orders' watermark = 200" in out
    # The operator side: the CLI and the REST API show what the tasks wrote, and the CLI fixes it.
    assert re.search(rf"remote_job_id\s.*{job}", out), out  # airflow state list, a table row
    for index in (0, 1, 2):
        assert f"process[{index}]: 2 keys" in out
    assert f'remote_job_id = "{job}" (try 1)' in out
    assert "GET .../stateEntry?key=remote_job_id: 404 key_not_found" in out
