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

        from airflow_task_state import task_state

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

        from airflow_task_state import task_state

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

    @task(retries=0)
    def fork_children_that_import_state() -> dict:
        """
        The same with bare os.fork, and the state accessors imported by the children only: nothing
        is written before the fork, so the children write the proof themselves, all at once, over
        the supervisor channel they share.
        """
        import os
        import tempfile
        import time
        from pathlib import Path

        results = Path(tempfile.mkdtemp())
        start_at = time.time() + 1.0
        pids = []
        for i in range(CHILDREN):
            pid = os.fork()
            if pid == 0:
                outcome = "ok"
                try:
                    from airflow_task_state import task_state

                    time.sleep(max(0.0, start_at - time.time()))
                    task_state.set(f"late_child_{i}", i)
                except BaseException as error:
                    outcome = f"{type(error).__name__}: {error}"
                finally:
                    (results / str(i)).write_text(outcome)
                    os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        found = {int(path.name): path.read_text() for path in results.iterdir()}
        failed = {i: outcome for i, outcome in found.items() if outcome != "ok"}
        if failed or len(found) != CHILDREN:
            raise RuntimeError(f"{len(failed)} of {CHILDREN} forked processes failed: {failed}")
        return {"children": CHILDREN}

    fork_children() >> fork_children_that_import_state()


state_forked_first_calls()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_first_call_writes():
    @task(retries=0)
    def never_touches_state() -> None:
        """Nothing of ours beyond what the plugin's listener imports: not the accessors."""
        import sys

        if "airflow_task_state.worker.accessors" in sys.modules:
            raise RuntimeError("a task that never touches state imported the state accessors")

    @task(retries=0)
    def imports_inside_the_task() -> None:
        from airflow_task_state import task_state

        task_state.set("first", 1)

    never_touches_state() >> imports_inside_the_task()


state_first_call_writes()
