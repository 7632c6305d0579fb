"""DAGs of the large-values tests (test_large_values_in_tasks.py), for `airflow dags test`."""

from __future__ import annotations

import asyncio
import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, dag, task

LARGE_ASSET = Asset(name="state_tests_large", uri="file:///tmp/state-tests/large")
# Past [state] max_value_bytes, which the tests set to 4096.
BIG = {"rows": [{"id": n, "name": f"row {n}"} for n in range(2000)]}


def _refused(call) -> str:
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "accepted"


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_large_values():
    @task(outlets=[LARGE_ASSET])
    def exercise() -> dict:
        from airflow_task_state import StateConflictError, asset_state, task_state

        out: dict = {}
        version = task_state.set("big", BIG)
        out["round_trip"] = task_state.get("big") == BIG
        versioned = task_state.get_versioned("big")
        out["versioned"] = versioned is not None and versioned.value == BIG and versioned.version == version
        out["conditional"] = task_state.set("big", {**BIG, "v": 2}, if_version=version) == version + 1
        out["stale_version"] = _refused(lambda: task_state.set("big", BIG, if_version=version))
        out["update"] = task_state.update("big", lambda old: {**old, "v": old["v"] + 1})["v"] == 3
        out["increment"] = _refused(lambda: task_state.increment("big"))
        versions = task_state.set_many({"many_big": BIG, "many_small": 1})
        out["batch"] = sorted(versions) == ["many_big", "many_small"]
        out["batch_read"] = task_state.get_many(["many_big", "many_small"]) == {
            "many_big": BIG,
            "many_small": 1,
        }
        out["asset"] = asset_state[LARGE_ASSET].set("big", BIG) is not None and (
            asset_state[LARGE_ASSET].get("big") == BIG
        )
        # Files and bytes: a path, a file object, bytes; read back to a path, a file object, bytes.
        with tempfile.TemporaryDirectory() as folder:
            source, target = Path(folder, "checkpoint.bin"), Path(folder, "restored.bin")
            source.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
            task_state.set_file("file", source)
            out["file"] = task_state.get_file("file", target) and target.read_bytes() == source.read_bytes()
            with source.open("rb") as opened:
                task_state.set_file("file_object", opened, ttl=timedelta(days=1))
            out["bytes"] = task_state.get_bytes("file_object") == source.read_bytes()
        task_state.set_bytes("small_bytes", b"\x00\x01")
        out["small_bytes"] = task_state.get_bytes("small_bytes") == b"\x00\x01"
        out["absent_file"] = task_state.get_file("absent", "/nonexistent/x") is False
        out["json_as_file"] = _refused(lambda: task_state.get_bytes("many_small"))
        out["file_as_json"] = _refused(lambda: task_state.get("small_bytes"))
        out["reserved"] = _refused(lambda: task_state.set("k", {"$airflow_task_state.large_value": {}}))

        async def in_async() -> bool:
            await task_state.aset_bytes("async_bytes", b"async")
            await task_state.aset("async_big", BIG)
            return await task_state.aget_bytes("async_bytes") == b"async" and (
                await task_state.aget("async_big") == BIG
            )

        out["async"] = asyncio.run(in_async())
        task_state.delete("many_big")
        out["keys"] = task_state.keys()
        try:
            task_state.set("big", BIG, if_version=1)
        except StateConflictError:
            out["conflict_is_conflict"] = True
        return out

    exercise()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_large_staged():
    @task(retries=1, retry_delay=timedelta(seconds=0))
    def stage_then_maybe_fail() -> dict:
        from airflow.sdk import get_current_context
        from airflow_task_state import task_state

        try_number = get_current_context()["ti"].try_number
        task_state.stage("staged_big", {**BIG, "try": try_number})
        seen = task_state.get("staged_big")["try"]
        # A file staged: uploaded now, its reference stored only by the commit.
        task_state.stage_bytes("staged_file", f"try {try_number}\n".encode() * 100_000)
        seen_file = task_state.get_bytes("staged_file")[:5].decode()
        if try_number == 1:
            raise RuntimeError("try 1 fails after staging a large value and a file")
        return {"seen_in_try": seen, "file_seen_in_try": seen_file}

    stage_then_maybe_fail()


state_large_values()
state_large_staged()
