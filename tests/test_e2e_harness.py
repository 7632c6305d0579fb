"""The end-to-end harness runs a real Airflow deployment: tasks run, and a task killed hard is retried."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment import Deployment, airflow_deployment

DAGS = Path(__file__).parent / "e2e_dags"


@pytest.fixture(scope="module")
def deployment(db_kind: str) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the end-to-end deployment runs on PostgreSQL: use --db postgres")
    started = time.monotonic()
    with airflow_deployment(DAGS) as running:
        print(f"\ndeployment started in {time.monotonic() - started:.1f}s")
        yield running


def _run(deployment: Deployment, dag_id: str, run_id: str, marker: Path) -> str:
    """Trigger a run once its dag is parsed; return the run's final state."""
    deployment.wait_for_dag(dag_id, timeout=60)
    started = time.monotonic()
    deployment.trigger(dag_id, run_id, conf={"marker": str(marker)})
    state = deployment.wait_for_run(dag_id, run_id, timeout=90)
    print(f"\n{dag_id}: trigger to {state} in {time.monotonic() - started:.1f}s")
    return state


def test_a_triggered_run_runs_its_task_in_a_real_task_process(deployment, tmp_path):
    marker = tmp_path / "smoke"

    state = _run(deployment, "harness_smoke", "smoke_1", marker)

    assert state == "success", deployment.logs()
    assert marker.read_text() == "ran try 1\n"
    [ti] = deployment.task_instances("harness_smoke", "smoke_1")
    assert (ti["task_id"], ti["state"], ti["try_number"]) == ("write_marker", "success", 1)


def test_a_task_whose_process_is_killed_hard_is_retried_and_succeeds(deployment, tmp_path):
    marker = tmp_path / "crash"

    state = _run(deployment, "harness_crash_retry", "crash_1", marker)

    assert state == "success", deployment.logs()
    assert marker.read_text() == "ran try 1\nran try 2\n"
    [ti] = deployment.task_instances("harness_crash_retry", "crash_1")
    assert (ti["task_id"], ti["state"], ti["try_number"]) == ("crash_then_succeed", "success", 2)
