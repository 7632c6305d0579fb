"""DAGs of the end-to-end staged-writes tests: a killed try, a failed try, a success, concurrent runs."""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, get_current_context, task
from airflow_task_state import asset_state, task_state

KILLED = Asset(name="staged_e2e_killed", uri="file:///tmp/state-e2e/staged-killed")
RAISED = Asset(name="staged_e2e_raised", uri="file:///tmp/state-e2e/staged-raised")
SUCCEEDED = Asset(name="staged_e2e_succeeded", uri="file:///tmp/state-e2e/staged-succeeded")
SHARED = Asset(name="staged_e2e_shared", uri="file:///tmp/state-e2e/staged-shared")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def staged_killed():
    @task(outlets=[KILLED], retries=1, retry_delay=timedelta(seconds=1))
    def stage_then_die() -> None:
        try_number = get_current_context()["ti"].try_number
        if try_number == 1:
            asset_state[KILLED].stage("watermark", 100)
            asset_state[KILLED].stage_increment("loads")
            task_state.stage("progress", "staged by try 1")
            os.kill(os.getpid(), signal.SIGKILL)
        # Try 2 records what try 1 left: nothing of what it staged.
        task_state.set(
            "seen_by_try_2",
            {"watermark": asset_state[KILLED].get("watermark"), "progress": task_state.get("progress")},
        )

    stage_then_die()


staged_killed()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def staged_raised():
    @task(outlets=[RAISED])
    def stage_then_raise() -> None:
        asset_state[RAISED].stage("watermark", 100)
        task_state.stage("progress", "staged before the failure")
        raise RuntimeError("failed after staging")

    stage_then_raise()


staged_raised()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def staged_succeeded():
    @task(outlets=[SUCCEEDED])
    def stage_then_succeed() -> None:
        asset_state[SUCCEEDED].stage("watermark", 100)
        asset_state[SUCCEEDED].stage_increment("loads")
        task_state.stage("progress", "done")
        for n in range(50):
            asset_state[SUCCEEDED].stage(f"partition-{n}", n)

    stage_then_succeed()


staged_succeeded()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=4)
def staged_concurrent():
    @task(outlets=[SHARED])
    def count(part: int) -> None:
        run_id = get_current_context()["run_id"]
        asset_state[SHARED].stage_increment("total")
        asset_state[SHARED].stage_increment("sum", part)
        asset_state[SHARED].stage(f"done/{run_id}/{part}", True)
        task_state.stage("counted", part)

    count.expand(part=[1, 2, 3, 4])


staged_concurrent()
