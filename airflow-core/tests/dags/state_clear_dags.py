"""A DAG whose task instances the clear tests archive, clear and start again (see test_clears.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

#: One task per scenario, so that each test has task instances of its own in the one run.
TASKS = 42


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_clear_cases():
    for n in range(TASKS):

        @task(task_id=f"t{n}", retries=1, retry_delay=timedelta(seconds=0))
        def noop() -> None:
            return None

        noop()

    @task(retries=1, retry_delay=timedelta(seconds=0))
    def mapped(item: int) -> None:
        return None

    mapped.expand(item=[1, 2, 3])

    # Cleared with `airflow tasks clear --task-regex`, which Airflow 3.2 matches as a substring.
    @task(retries=1, retry_delay=timedelta(seconds=0))
    def by_cli() -> None:
        return None

    by_cli()


state_clear_cases()
