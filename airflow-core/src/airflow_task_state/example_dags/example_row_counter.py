"""
Counters and watermarks that concurrent tasks share without losing an update.

Each mapped instance loads one partition and adds its row count to the asset's ``rows_loaded``
with ``increment`` (one atomic step: no count is lost however many instances run at once), then
moves the asset's ``high_watermark`` forward with ``update`` (read, compute, write only if nobody
wrote in between, else again): a slower instance never moves it back. The task's own progress
note expires after a day (``ttl``) instead of after ``[state] default_task_retention``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, task

from airflow_task_state import asset_state, task_state

ROWS = Asset(name="example_rows", uri="file:///tmp/airflow-state-example/rows")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["example", "asset-state"])
def example_row_counter():
    @task(outlets=[ROWS])
    def load_partition(partition: int) -> dict:
        rows = 100 + partition  # what loading this partition would have counted
        task_state.set("progress", {"partition": partition, "rows": rows}, ttl=timedelta(days=1))
        state = asset_state[ROWS]
        total = state.increment("rows_loaded", by=rows)
        # Never moves back, whichever instance finishes last.
        watermark = state.update("high_watermark", lambda seen: max(seen, partition), default=-1)
        return {"partition": partition, "total_so_far": total, "high_watermark": watermark}

    load_partition.expand(partition=[0, 1, 2, 3])


example_row_counter()
