"""DAGs the end-to-end fault tests run on a real deployment."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

WRITES = 250


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_writes_through_restart():
    @task
    def write_steadily() -> dict:
        """Writes one key every 0.1 s; the test restarts the API server in the middle."""
        import time

        from airflow.state import task_state

        failures = []
        for i in range(WRITES):
            try:
                task_state.set(f"write_{i:03d}", i)
            except Exception as error:  # counted, so one failure does not hide the next
                failures.append(f"{i}: {type(error).__name__}: {error}")
            time.sleep(0.1)
        if failures:
            raise RuntimeError(f"{len(failures)} writes failed: {failures[:5]}")
        return {"written": WRITES}

    write_steadily()


state_writes_through_restart()
