"""
Large values from task code, run by the real `airflow dags test` with a file:// object store: every
accessor (versions, if_version, update, batches, asset state, files, bytes, async) and staged
writes, then what the store and the object storage hold, and what `airflow state clean` leaves.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from airflow_task_state import large_values, task_scope
from airflow_task_state.cli.object_collector import collect
from state_testing.airflow_cli import run_airflow
from test_task_state_in_process import latest_run_id, returned

TEST_DAGS = Path(__file__).parent / "dags"
# In the SQLite pass only: to the metadata database a large value is an ordinary value (its
# reference's JSON). What reads and writes the database for large values (clean, the commit window,
# staged commits) runs on every database in test_large_values.py and test_staged_writes.py.
pytestmark = pytest.mark.any_database


@pytest.fixture(scope="module")
def large_runs(tmp_path_factory):
    """Both DAGs of state_large_values_dags.py run once; their output and the object store."""
    store = tmp_path_factory.mktemp("objects")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS / "state_large_values_dags.py"))
        mp.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
        mp.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{store}")
        mp.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "4096")
        run_airflow("dags", "reserialize")
        outputs = {}
        for dag_id in ("state_large_values", "state_large_staged"):
            result = run_airflow("dags", "test", dag_id)
            outputs[dag_id] = result.stdout + result.stderr
        yield {"store": store, "outputs": outputs, "env": mp}


def _reference(text: str | None) -> large_values.Reference:
    assert text is not None and text.startswith(large_values.TEXT_PREFIX), text
    return large_values.parse(json.loads(text))


def test_every_accessor_takes_and_returns_large_values(large_runs):
    out = returned(large_runs["outputs"]["state_large_values"])
    failed = {name: seen for name, seen in out.items() if seen is not True and name != "keys"}
    for name in ("stale_version", "increment", "json_as_file", "file_as_json", "reserved"):
        failed.pop(name)
    assert failed == {}
    assert "StateConflictError" in out["stale_version"]
    assert "InvalidStateError" in out["increment"] and "integer" in out["increment"]
    assert "holds a JSON value, not a file" in out["json_as_file"]
    assert "read them with get_file() or get_bytes()" in out["file_as_json"]
    assert "reserved for references" in out["reserved"]
    assert out["keys"] == [
        "async_big", "async_bytes", "big", "file", "file_object", "many_small", "small_bytes",
    ]  # fmt: skip


def test_the_store_keeps_references_and_clean_removes_only_what_none_names(large_runs, backend, monkeypatch):
    scope = task_scope("state_large_values", latest_run_id("state_large_values"), "exercise")
    big = _reference(backend.get(scope, "big"))
    assert big.kind == "json" and big.size > 4096
    assert _reference(backend.get(scope, "file")).size == 3 * 1024 * 1024 + 7
    assert backend.get(scope, "many_small") == "1"  # small values are stored as before
    store: Path = large_runs["store"]
    before = {path.name for path in store.iterdir()}
    # Unreferenced: big's first two versions (update wrote the third), the objects of the two writes
    # refused for a stale if_version (uploaded before the store said no), many_big's (deleted), and
    # the file try 1 of state_large_staged staged (uploaded, but the try failed: never committed).
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{store}")
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "1s")
    time.sleep(1.1)
    collected = collect(backend, dry_run=False)
    assert (collected.removed, collected.too_young) == (6, 0)
    after = {path.name for path in store.iterdir()}
    assert len(before - after) == 6 and big.name in after


def test_a_staged_large_value_is_applied_with_the_commit_or_not_at_all(large_runs, backend):
    out = returned(large_runs["outputs"]["state_large_staged"])
    assert out == {"seen_in_try": 2, "file_seen_in_try": "try 2"}
    run_id = latest_run_id("state_large_staged")
    reference = _reference(
        backend.get(task_scope("state_large_staged", run_id, "stage_then_maybe_fail"), "staged_big")
    )
    local = Path(reference.path.removeprefix("file://"))
    assert json.loads(local.read_text())["try"] == 2
    # Try 1 failed: its staged value was never uploaded (no object holds try 1).
    tries = [
        json.loads(path.read_text()).get("try")
        for path in large_runs["store"].iterdir()
        if path.stat().st_size < 10**6 and path.read_bytes()[:1] == b"{"
    ]
    assert 1 not in tries
    # The staged file: try 2's bytes, committed with its success; try 1's object (uploaded as it
    # was staged) no key names, and clean collects it (the test above).
    staged_file = _reference(
        backend.get(task_scope("state_large_staged", run_id, "stage_then_maybe_fail"), "staged_file")
    )
    assert staged_file.kind == "bytes"
    assert Path(staged_file.path.removeprefix("file://")).read_bytes() == b"try 2\n" * 100_000
