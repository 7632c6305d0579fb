"""Each mapped task instance has its own task state: instance 0 never sees instance 1's keys."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from airflow_task_state import task_state


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["example", "task-state"])
def example_mapped_state():
    @task
    def process(partition: int) -> dict:
        seen_before = task_state.keys()
        task_state.set("partition", partition)
        task_state.set("offset", partition * 1000)
        return {"partition": partition, "keys_before": seen_before, "keys_after": task_state.keys()}

    process.expand(partition=[0, 1, 2])


example_mapped_state()
