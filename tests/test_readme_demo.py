"""The README's first command tells the story it promises."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]


def test_demo_command_shows_state_across_tries_runs_map_indexes_and_assets(db_kind):
    if db_kind != "sqlite":
        pytest.skip("the demo runs on the embedded default, SQLite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    result = subprocess.run(
        [str(REPO / "dev" / "demo")], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "[state] backend = airflow.state.metastore.MetastoreStateBackend" in out
    assert "try 2: found remote_job_id=app_001 in task state -> reconnected" in out
    assert "run_2 reads remote_job_id -> None" in out
    assert "process_partition[1] offset = 1000" in out
    assert "run_2 reads watermark = 2026-11-29T00:00:00+00:00" in out
    assert "after deleting run_1: remote_job_id -> None" in out
