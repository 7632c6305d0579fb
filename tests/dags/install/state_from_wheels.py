"""The DAG tests/test_install_from_wheels.py runs in a deployment installed from the built wheels."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, get_current_context, task

ORDERS = Asset("orders", uri="file:///tmp/state-from-wheels/orders")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_from_wheels():
    @task(retries=1, retry_delay=timedelta(seconds=0), outlets=[ORDERS])
    def submit_then_reconnect() -> None:
        """Try 1 stores a job id and fails; try 2 must find it, and records what it found."""
        from airflow.state import asset_state, task_state

        try_number = get_current_context()["ti"].try_number
        if try_number == 1:
            task_state.set("remote_job_id", "app_001")
            raise RuntimeError("try 1 fails on purpose, after storing its job id")
        task_state.set("found_on_retry", task_state.get("remote_job_id"))
        asset_state[ORDERS].set("watermark", "2026-12-01")

    submit_then_reconnect()


state_from_wheels()
