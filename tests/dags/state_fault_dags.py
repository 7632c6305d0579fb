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


CHILDREN = 6


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_forked_first_calls():
    @task(retries=0)
    def fork_children() -> dict:
        """
        Forks processes that make their first state call at the same moment, as a task using
        multiprocessing does: each needs a credential, and every one of them must get it.
        """
        import multiprocessing

        from airflow.state import task_state

        context = multiprocessing.get_context("fork")
        start_together = context.Barrier(CHILDREN)
        outcomes = context.Queue()

        def child(i: int) -> None:
            start_together.wait(timeout=60)
            try:
                task_state.set(f"child_{i}", i)
                outcomes.put((i, "ok"))
            except Exception as error:
                outcomes.put((i, f"{type(error).__name__}: {error}"))

        processes = [context.Process(target=child, args=(i,)) for i in range(CHILDREN)]
        for process in processes:
            process.start()
        found = dict(outcomes.get(timeout=120) for _ in processes)
        for process in processes:
            process.join(timeout=60)
        failed = {i: outcome for i, outcome in found.items() if outcome != "ok"}
        if failed:
            raise RuntimeError(f"{len(failed)} of {CHILDREN} forked processes failed: {failed}")
        return {"children": CHILDREN}

    fork_children()


state_forked_first_calls()
