"""
Writes that count only if the try succeeds: task code stages them, its success commits them all at
once, anything else applies none. Real task code under the real `airflow dags test` (the listener's
hooks run in-process), and the commit route over HTTP as a hostile task would call it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from airflow_shared.state import COMMIT_KEY, AssetScope, TaskScope, commit_records_scope
from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential
from airflow_task_state.api.signing_keys import forget_configured_keys, signing_key
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from state_testing.airflow_cli import run_airflow

TEST_DAGS = Path(__file__).parent / "dags"
SESSION_KEY = "a-staged-writes-session-key-" + "x" * 50
COMMIT_PATH = "/task-instances/{}/staged/commit"


def _returned(output: str) -> dict:
    marker = "Done. Returned value was: "
    values = [
        ast.literal_eval(line.split(marker, 1)[1].rsplit(" [airflow", 1)[0])
        for line in output.splitlines()
        if marker in line
    ]
    dicts = [value for value in values if isinstance(value, dict)]
    assert dicts, output[-3000:]
    return dicts[-1]


def _asset_scope(name: str) -> AssetScope:
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return AssetScope(session.scalar(select(AssetModel.id).where(AssetModel.name == name)))


def _latest_ti(dag_id: str, task_id: str) -> TaskInstanceClaims:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
            .order_by(TaskInstance.start_date.desc())
        ).first()
        return TaskInstanceClaims(str(ti.id), ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)


@pytest.fixture(scope="module")
def staged_run() -> Iterator[dict]:
    """`state_staged_writes` run once (try 1 fails after staging, try 2 succeeds), and what it left."""
    from airflow_task_state import get_state_backend

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
        mp.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
        run_airflow("dags", "reserialize")
        result = run_airflow("dags", "test", "state_staged_writes")
        output = result.stdout + result.stderr
        Path("/tmp/staged_run_output.txt").write_text(output)
        claims = _latest_ti("state_staged_writes", "advance")
        backend = get_state_backend()
        yield {
            "output": output,
            "out": _returned(output),
            "claims": claims,
            "task": _task_scope(claims),
            "asset": _asset_scope("state_tests_staged"),
            "backend": backend,
        }


def _task_scope(claims: TaskInstanceClaims) -> TaskScope:
    from airflow_task_state import task_scope

    return task_scope(claims.dag_id, claims.run_id, claims.task_id, claims.map_index)


def test_reads_in_the_try_see_its_staged_writes(staged_run):
    out = staged_run["out"]
    before = out["at_start"]["runs"]
    assert out["reads"]["watermark"] == "through try 2"
    assert out["reads"]["runs"] == before + 3  # what is stored, plus what is staged
    assert out["reads"]["many"] == {"watermark": "through try 2", "runs": before + 3}
    assert out["reads"]["staged"] == {"try": 2}
    assert out["reads"]["doomed"] == "gone"  # a staged delete hides the key
    assert "staged_by_try_2" in out["reads"]["task_keys"]
    assert "doomed" not in out["reads"]["task_keys"]


def test_a_failed_try_applies_nothing_and_the_retry_applies_only_its_own(staged_run):
    out, backend = staged_run["out"], staged_run["backend"]
    task, asset = staged_run["task"], staged_run["asset"]
    # Try 2 started from what was stored: nothing try 1 staged, all it wrote directly.
    assert out["at_start"]["task_keys"] == ["direct_by_try_1", "doomed"]
    assert "Dropped 4 staged state write(s)" in staged_run["output"]  # try 1's failure hook
    # After try 2's success: try 2's writes, each once; never try 1's.
    assert backend.get(asset, "watermark") == '"through try 2"'
    assert int(backend.get(asset, "runs")) == out["at_start"]["runs"] + 3
    stored = backend.keys(task)
    assert "staged_by_try_1" not in stored
    assert backend.get(task, "staged_by_try_2") == '{"try":2}'
    assert backend.get(task, "doomed") is None and backend.get(task, "label") is None
    assert {"direct_by_try_1", "direct_by_try_2"} <= set(stored)
    # Recorded apart from the task's state, where no clear of it reaches.
    assert backend.get(task, COMMIT_KEY) is None
    claims = staged_run["claims"]
    assert backend.get(commit_records_scope(task), claims.ti_id) == json.dumps(claims.ti_id)
    assert "Committed" in staged_run["output"]


def test_bad_staged_writes_fail_in_the_task_at_once(staged_run):
    assert staged_run["out"]["refused"] == {
        "none_value": "ValueError",
        "nan_value": "ValueError",
        "empty_key": "ValueError",
        "negative_ttl": "ValueError",
        "commit_key": "ValueError",
        "float_increment": "TypeError",
        "inlet_only": "StateAccessDeniedError",
        "undeclared": "StateAccessDeniedError",
        "increment_over_text": "ValueError",
        "versioned_read_of_staged": "ValueError",
    }


def test_a_forked_process_reads_the_staged_copy_but_cannot_stage(staged_run):
    seen = staged_run["out"]["forked_child"]
    assert seen["read"] == {"try": 2}
    assert "forked from the task process" in seen["stage"]
    assert staged_run["backend"].get(staged_run["task"], "from_child") is None


def test_a_try_that_fails_applies_none_of_its_staged_writes(staged_run):
    backend, asset = staged_run["backend"], staged_run["asset"]
    before = backend.get_many(asset, ["watermark", "runs"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
        result = run_airflow("dags", "test", "state_staged_failure", check=False)
    assert "fail after staging" in result.stdout + result.stderr
    assert backend.get_many(asset, ["watermark", "runs"]) == before
    claims = _latest_ti("state_staged_failure", "stage_then_fail")
    assert backend.keys(_task_scope(claims)) == []


# --- the commit route, as a hostile or replaying task process calls it -------------------------


@pytest.fixture
def api(monkeypatch) -> Iterator[TestClient]:
    from airflow_task_state.api.app import create_app

    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", SESSION_KEY)
    forget_configured_keys()
    with TestClient(create_app()) as client:
        yield client
    forget_configured_keys()


def _commit(api: TestClient, claims: TaskInstanceClaims, writes: list[dict], ti_id: str | None = None):
    headers = {"Authorization": f"Bearer {issue_credential(claims, signing_key())}"}
    return api.post(
        COMMIT_PATH.format(ti_id or claims.ti_id),
        content=json.dumps({"writes": writes}),
        headers={**headers, "Content-Type": "application/json"},
    )


def _set_state(claims: TaskInstanceClaims, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(update(TaskInstance).where(TaskInstance.id == UUID(claims.ti_id)).values(state=state))


STAGED = {"scope": "asset", "name": "state_tests_staged"}


def test_a_replayed_commit_applies_nothing_twice(staged_run, api):
    backend, asset = staged_run["backend"], staged_run["asset"]
    runs = backend.get(asset, "runs")
    # The try's commit was applied by its success hook: the same try sending it again (a lost reply).
    answer = _commit(api, staged_run["claims"], [{**STAGED, "key": "runs", "op": "increment", "by": 5}])
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"applied": False, "writes": 1}
    assert backend.get(asset, "runs") == runs


@pytest.mark.parametrize("state", ["running", "failed", "up_for_retry", "restarting", "queued"])
def test_a_try_that_has_not_succeeded_cannot_commit(staged_run, api, state):
    backend, asset = staged_run["backend"], staged_run["asset"]
    runs = backend.get(asset, "runs")
    _set_state(staged_run["claims"], state)
    try:
        answer = _commit(api, staged_run["claims"], [{**STAGED, "key": "runs", "op": "increment"}])
    finally:
        _set_state(staged_run["claims"], "success")
    assert answer.status_code == 403, answer.text
    assert f"is {state}, not success" in answer.json()["detail"]["message"]
    assert backend.get(asset, "runs") == runs


@pytest.mark.parametrize(
    ("asset", "reason", "words"),
    [
        ("state_tests_staged_inlet", "asset_not_declared", "as an inlet only"),
        ("state_tests_staged_other", "asset_not_declared", "does not declare"),
        ("no_such_asset", "asset_not_found", "no asset"),
    ],
)
def test_a_commit_to_an_asset_that_is_not_an_outlet_writes_nothing(staged_run, api, asset, reason, words):
    backend, task = staged_run["backend"], staged_run["task"]
    writes = [
        {"scope": "task", "key": "hostile", "op": "set", "value": 1},
        {"scope": "asset", "name": asset, "key": "hostile", "op": "set", "value": 1},
    ]
    answer = _commit(api, staged_run["claims"], writes)
    assert answer.json()["detail"]["reason"] == reason, answer.text
    assert words in answer.json()["detail"]["message"]
    assert backend.get(task, "hostile") is None


@pytest.mark.parametrize(
    ("write", "words"),
    [
        ({"scope": "task", "key": "k", "op": "set"}, "carries a value"),
        ({"scope": "task", "key": "k", "op": "set", "value": None}, "carries a value"),
        ({"scope": "task", "key": "", "op": "set", "value": 1}, "must not be empty"),
        ({"scope": "task", "key": "k", "op": "rename"}, "op must be"),
        ({"scope": "task", "key": "k", "op": "increment", "by": 1.5}, "by must be an int"),
        ({"scope": "task", "key": "k", "op": "delete", "ttl": 5}, "no ttl"),
        ({"scope": "task", "key": "k", "op": "set", "value": 1, "by": 2}, "a set carries no by"),
        ({"scope": "asset", "name": 5, "key": "k", "op": "set", "value": 1}, "names the asset"),
        ({"scope": "task", "key": "k", "op": "set", "value": 1, "ttl": -1}, "ttl must be"),
        ({"scope": "task", "key": COMMIT_KEY, "op": "set", "value": 1}, "is reserved"),
        ({"scope": "dag", "key": "k", "op": "set", "value": 1}, "scope must be"),
        ({"scope": "task", "key": "k", "op": "set", "value": 1, "extra": 1}, "unknown: extra"),
    ],
)
def test_a_commit_with_one_bad_write_is_refused_whole(staged_run, api, write, words):
    backend, task = staged_run["backend"], staged_run["task"]
    good = {"scope": "task", "key": "good", "op": "set", "value": 1}
    answer = _commit(api, staged_run["claims"], [good, write])
    assert answer.status_code == 422, answer.text
    assert words in answer.json()["detail"]["message"]
    assert backend.get(task, "good") is None


def test_a_commit_names_only_its_own_task_instance(staged_run, api):
    other = "00000000-0000-7000-8000-000000000000"
    answer = _commit(api, staged_run["claims"], [], ti_id=other)
    assert answer.status_code == 403
    assert "cannot access task instance" in answer.json()["detail"]["message"]


def test_a_commit_larger_than_max_batch_bytes_is_refused(staged_run, api, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_BATCH_BYTES", "2000")
    writes = [{"scope": "task", "key": f"k{n}", "op": "set", "value": "x" * 100} for n in range(30)]
    answer = _commit(api, staged_run["claims"], writes)
    assert answer.status_code == 413, answer.text
    assert staged_run["backend"].get(staged_run["task"], "k0") is None


def test_a_task_process_that_ends_with_writes_staged_says_they_were_never_committed(tmp_path):
    """What a deferral or reschedule does (the process ends, no hook runs): the log says so."""
    import subprocess
    import sys

    script = tmp_path / "ends_with_staged_writes.py"
    script.write_text(
        "import logging, os\n"
        "from airflow_task_state.worker import staging\n"
        "from airflow_shared.state import StagedOp\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "held = staging._by_try.setdefault('ti-1', staging._TryWrites(os.getpid()))\n"
        "held.writes[(None, 'watermark')] = staging.Staged(StagedOp.SET, '7')\n"
        "staging._warn_at_exit()\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    logged = result.stdout + result.stderr  # wherever Airflow's logging sends it
    assert "1 staged write(s) were never committed" in logged
    assert "stage writes after resuming" in logged


# Last in this module: it clears the task state the tests above read.
def test_a_commit_sent_again_after_clear_on_success_applies_nothing(staged_run, api):
    """
    The try's commit was applied by its success hook, then clear on success emptied its task state:
    the same commit sent again (a retry after a lost reply) must still find itself applied.
    """
    backend, asset, claims = staged_run["backend"], staged_run["asset"], staged_run["claims"]
    runs = int(backend.get(asset, "runs"))
    headers = {"Authorization": f"Bearer {issue_credential(claims, signing_key())}"}
    cleared = api.post(f"/task-instances/{claims.ti_id}/succeeded", headers=headers)
    assert cleared.status_code == 204, cleared.text
    assert backend.keys(staged_run["task"]) == []
    again = _commit(api, claims, [{**STAGED, "key": "runs", "op": "increment", "by": 5}])
    assert again.status_code == 200, again.text
    assert again.json() == {"applied": False, "writes": 1}
    assert int(backend.get(asset, "runs")) == runs  # moved once, by the commit the hook sent
