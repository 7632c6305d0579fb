"""
DAGs whose runs leave task and asset state behind, for the operator surfaces (REST API, UI) to see.

`operator_alpha` and `operator_beta` are alike, so a user allowed on one DAG only (see
`state_testing.auth_managers`) can be shown to see one and not the other.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, task

ALPHA_ASSET = Asset(name="operator_alpha_orders", uri="file:///tmp/operator/alpha_orders")
BETA_ASSET = Asset(name="operator_beta_orders", uri="file:///tmp/operator/beta_orders")


def _state_dag(dag_id: str, asset: Asset):
    @dag(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
    def leaves_state():
        @task
        def submit() -> None:
            from airflow_task_state import task_state

            task_state.set("remote_job_id", f"{dag_id}-job-001")
            task_state.set("progress", {"pages": 3, "done": False, "note": "naïve ☃"})

        @task
        def partition(n: int) -> None:
            from airflow_task_state import task_state

            task_state.set("offset", n * 1000)

        @task(outlets=[asset])
        def load() -> None:
            from airflow_task_state import asset_state

            asset_state[asset].set("watermark", "2026-11-30T00:00:00+00:00")

        submit() >> partition.expand(n=[0, 1]) >> load()

    return leaves_state()


_state_dag("operator_alpha", ALPHA_ASSET)
_state_dag("operator_beta", BETA_ASSET)


#: How many times `operator_live`'s task writes its counter, and how long it waits between writes.
LIVE_WRITES = 30
LIVE_WRITE_EVERY_SECONDS = 0.5
#: How long it waits for the key "go" before counting anyway.
LIVE_WAIT_FOR_GO_SECONDS = 120


@dag(dag_id="operator_live", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def writes_while_it_runs():
    """
    A task that keeps writing for a while (~15 s), for the State tab to follow; triggered by tests.
    It starts counting once someone puts the key "go" into its state, so that a test can open its
    pages first, whatever the time the task takes to start.
    """

    @task
    def count() -> None:
        import time

        from airflow_task_state import task_state

        task_state.set("note", "written once, as the task starts")
        deadline = time.monotonic() + LIVE_WAIT_FOR_GO_SECONDS
        while task_state.get("go") is None and time.monotonic() < deadline:
            time.sleep(0.2)
        for n in range(1, LIVE_WRITES + 1):
            task_state.set("counter", n)
            time.sleep(LIVE_WRITE_EVERY_SECONDS)

    count()


writes_while_it_runs()
