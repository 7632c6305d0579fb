"""
Writes that count only if the try succeeds, on a real deployment (api-server, scheduler,
dag-processor, LocalExecutor, PostgreSQL): a try killed with SIGKILL after staging applies nothing,
nor does one that raises; a success applies everything; concurrent runs advancing one asset all count.
"""

from __future__ import annotations

import json

import pytest
from airflow_shared.state import COMMIT_KEY, COMMIT_RECORDS_TASK_ID
from state_testing.deployment import Deployment

CONCURRENT_RUNS = [f"concurrent_{n}" for n in range(4)]
RUNS = [
    ("staged_killed", "killed_1"),
    ("staged_raised", "raised_1"),
    ("staged_succeeded", "succeeded_1"),
    *(("staged_concurrent", run_id) for run_id in CONCURRENT_RUNS),
]


@pytest.fixture(scope="module", autouse=True)
def runs(deployment: Deployment) -> None:
    """Every run triggered at once: they overlap, and each test waits for its own."""
    for dag_id, run_id in RUNS:
        deployment.wait_for_dag(dag_id, timeout=90)
        deployment.trigger(dag_id, run_id)


def run_to_end(deployment: Deployment, dag_id: str, run_id: str) -> str:
    return deployment.wait_for_run(dag_id, run_id, timeout=240)


def asset_state(deployment: Deployment, name: str) -> dict:
    rows = deployment.query(
        "SELECT s.key, s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id WHERE a.name = :n",
        n=name,
    )
    return {row["key"]: json.loads(row["value"]) for row in rows}


def task_state(deployment: Deployment, dag_id: str, run_id: str) -> dict:
    rows = deployment.query(
        "SELECT task_id, map_index, key, value FROM task_state WHERE dag_id = :d AND run_id = :r",
        d=dag_id,
        r=run_id,
    )
    return {(row["task_id"], row["map_index"], row["key"]): json.loads(row["value"]) for row in rows}


def test_a_try_killed_after_staging_applies_nothing(deployment):
    assert run_to_end(deployment, "staged_killed", "killed_1") == "success", deployment.logs()
    [ti] = deployment.task_instances("staged_killed", "killed_1")
    assert ti["try_number"] == 2  # try 1 was killed
    assert asset_state(deployment, "staged_e2e_killed") == {}
    state = task_state(deployment, "staged_killed", "killed_1")
    assert state[("stage_then_die", -1, "seen_by_try_2")] == {"watermark": None, "progress": None}
    assert ("stage_then_die", -1, "progress") not in state


def test_a_try_that_raises_after_staging_applies_nothing(deployment):
    assert run_to_end(deployment, "staged_raised", "raised_1") == "failed", deployment.logs()
    assert asset_state(deployment, "staged_e2e_raised") == {}
    assert task_state(deployment, "staged_raised", "raised_1") == {}


def test_a_try_that_succeeds_applies_everything(deployment):
    assert run_to_end(deployment, "staged_succeeded", "succeeded_1") == "success", deployment.logs()
    stored = asset_state(deployment, "staged_e2e_succeeded")
    assert stored == {"watermark": 100, "loads": 1, **{f"partition-{n}": n for n in range(50)}}
    [ti] = deployment.query(
        "SELECT id FROM task_instance WHERE dag_id = 'staged_succeeded' AND run_id = 'succeeded_1'"
    )
    state = task_state(deployment, "staged_succeeded", "succeeded_1")
    assert state[("stage_then_succeed", -1, "progress")] == "done"
    # The commit recorded itself under the try's id, in its run's records (a task id no DAG can use,
    # which no clear of the task reaches): a retried request would apply nothing twice.
    assert state[(COMMIT_RECORDS_TASK_ID, -1, str(ti["id"]))] == str(ti["id"])
    assert ("stage_then_succeed", -1, COMMIT_KEY) not in state


def test_concurrent_runs_advancing_one_asset_all_count(deployment):
    run_ids = CONCURRENT_RUNS
    for run_id in run_ids:
        assert run_to_end(deployment, "staged_concurrent", run_id) == "success", deployment.logs()
    stored = asset_state(deployment, "staged_e2e_shared")
    # 4 runs of 4 mapped task instances, each adding 1 (and its part) in its own commit.
    assert stored["total"] == 16
    assert stored["sum"] == 4 * (1 + 2 + 3 + 4)
    assert {key for key in stored if key.startswith("done/")} == {
        f"done/{run_id}/{part}" for run_id in run_ids for part in (1, 2, 3, 4)
    }
    for run_id in run_ids:
        state = task_state(deployment, "staged_concurrent", run_id)
        assert {index: state[("count", index, "counted")] for index in range(4)} == {0: 1, 1: 2, 2: 3, 3: 4}
