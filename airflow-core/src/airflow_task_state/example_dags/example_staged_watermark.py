"""
A watermark that advances only if the run succeeds: the task stages its writes, and they are applied
together, in one atomic step, when its try succeeds. A try that fails, is killed or is cleared
applies none of them, so the next run reads the old watermark and loads the same rows again
instead of skipping them.

Trigger with ``{"fail_after_staging": true}`` to see a failed try leave the watermark as it was.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, task

from airflow_task_state import asset_state

EVENTS = Asset(name="events", uri="file:///tmp/airflow-state-example/events")


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"fail_after_staging": False},
    tags=["example", "asset-state"],
)
def example_staged_watermark():
    @task(outlets=[EVENTS])
    def load_new_events(params: dict | None = None) -> dict:
        state = asset_state[EVENTS]
        previous = state.get("watermark", default=0)
        watermark = previous + 100  # rows (previous, watermark] loaded here
        state.stage("watermark", watermark)  # counts only if this try succeeds
        state.stage_increment("rows_loaded", 100)  # concurrent runs' increments all count
        # Reads in this try already see the staged values.
        assert state.get("watermark") == watermark
        if params and params.get("fail_after_staging"):
            raise RuntimeError(f"failed after staging: the watermark stays at {previous}")
        return {"previous": previous, "watermark": watermark}

    load_new_events()


example_staged_watermark()
