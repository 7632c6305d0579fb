"""DAGs that use versions, expiry, increments and clear-on-success, run with `airflow dags test`."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, task

COUNTED = Asset(name="state_tests_counted", uri="file:///tmp/state-tests/counted")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_versions_surface():
    @task(outlets=[COUNTED])
    def exercise() -> dict:
        import asyncio
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        from airflow_task_state import (
            NEVER_EXPIRES,
            InvalidStateError,
            StateConflictError,
            Versioned,
            asset_state,
            task_state,
        )

        out: dict = {}
        task_state.clear()
        # Increments, and one on a key that holds text: refused, nothing written.
        out["counts"] = [task_state.increment("rows") for _ in range(3)] + [
            task_state.increment("rows", by=-1)
        ]
        task_state.set("text", "forty")
        try:
            task_state.increment("text")
        except InvalidStateError as error:
            out["increment_text"] = str(error)
        out["text_kept"] = task_state.get("text")
        # Versions: set returns the new one, get_versioned reads it back.
        out["versions"] = [task_state.set("cas", "a", if_version=0), task_state.set("cas", "b", if_version=1)]
        out["versioned"] = tuple(task_state.get_versioned("cas"))
        out["is_versioned"] = isinstance(task_state.get_versioned("cas"), Versioned)
        out["missing_versioned"] = task_state.get_versioned("never-set")
        try:
            task_state.set("cas", "c", if_version=1)
        except StateConflictError as error:
            out["conflict"] = [error.key, error.expected, error.stored]
        # ttl: a timedelta, seconds, never; wrong ones are refused before any request.
        task_state.set("hour", 1, ttl=timedelta(hours=1))
        task_state.set("seconds", 1, ttl=90)
        task_state.set("forever", 1, ttl=NEVER_EXPIRES)
        for bad in (0, -1, timedelta(0), "forever", True, float("nan")):
            try:
                task_state.set("bad", 1, ttl=bad)
            except (TypeError, ValueError) as error:
                out.setdefault("bad_ttl", []).append(type(error).__name__)
        for bad in (-1, "1", True):
            try:
                task_state.set("bad", 1, if_version=bad)
            except (TypeError, ValueError) as error:
                out.setdefault("bad_if_version", []).append(type(error).__name__)

        # update() under a concurrent writer: the first call of fn lets another write in between
        # its read and its conditional write; that write is not lost, fn runs again on top of it.
        calls = []

        def append_mine(items: list) -> list:
            calls.append(list(items))
            if len(calls) == 1:
                task_state.set("log", [*items, "intruder"])
            return [*items, "mine"]

        task_state.set("log", ["start"])
        out["updated"] = task_state.update("log", append_mine)
        out["update_calls"] = len(calls)
        out["log"] = task_state.get("log")

        # Threads updating the same key: no element lost.
        def add(i: int) -> None:
            task_state.update("many", lambda items: [*items, i], default=[])

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: contextvars.copy_context().run(add, i), range(12)))
        out["many"] = sorted(task_state.get("many"))
        # A writer that always comes in between: update gives up after max_attempts.
        always = []

        def always_beaten(value: int) -> int:
            always.append(value)
            task_state.increment("contended")
            return value + 100

        try:
            task_state.update("contended", always_beaten, default=0, max_attempts=3)
        except StateConflictError:
            out["gave_up_after"] = len(always)

        async def async_side() -> dict:
            async def double(value: int) -> int:
                return value * 2

            await task_state.aset("async", 5, ttl=60)
            return {
                "aincrement": await task_state.aincrement("async", by=2),
                "aupdate": await task_state.aupdate("async", double),
                "aupdate_sync_fn": await task_state.aupdate("async", lambda v: v + 1),
                "aget_versioned": tuple(await task_state.aget_versioned("async")),
            }

        out["async"] = asyncio.run(async_side())
        out["asset"] = [asset_state[COUNTED].increment("seen", by=5), asset_state[COUNTED].increment("seen")]
        return out

    exercise()


state_versions_surface()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_clear_on_success():
    @task
    def keeps() -> None:
        from airflow_task_state import task_state

        task_state.set("kept", 1)

    @task
    def clears() -> None:
        from airflow_task_state import task_state

        task_state.set("gone", 1)

    cleared = clears()
    cleared.operator.clear_task_state_on_success = True
    keeps() >> cleared


state_clear_on_success()
