"""An async task keeps a checkpoint with aget/aset without blocking its event loop."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from airflow_task_state import task_state


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["example", "task-state"])
def example_async_state():
    @task
    async def crawl() -> dict:
        checkpoint = await task_state.aget("checkpoint", default={"page": 0})
        for page in range(checkpoint["page"] + 1, 4):
            await task_state.aset("checkpoint", {"page": page})
        return {"resumed_from": checkpoint["page"], "keys": await task_state.akeys()}

    crawl()


example_async_state()
