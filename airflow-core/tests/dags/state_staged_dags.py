"""DAGs of the staged-writes tests, for `airflow dags test`."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, task

STAGED = Asset(name="state_tests_staged", uri="file:///tmp/state-tests/staged")
STAGED_INLET = Asset(name="state_tests_staged_inlet", uri="file:///tmp/state-tests/staged-inlet")
STAGED_OTHER = Asset(name="state_tests_staged_other", uri="file:///tmp/state-tests/staged-other")


def _refusals() -> dict:
    """What staging refuses at once, in the task: error class names by case."""
    from airflow_task_state import asset_state, task_state

    cases = {
        "none_value": lambda: task_state.stage("k", None),
        "nan_value": lambda: task_state.stage("k", float("nan")),
        "empty_key": lambda: task_state.stage("", 1),
        "negative_ttl": lambda: task_state.stage("k", 1, ttl=-5),
        "commit_key": lambda: task_state.stage("airflow.staged_commit", 1),
        "float_increment": lambda: task_state.stage_increment("k", 1.5),
        "inlet_only": lambda: asset_state[STAGED_INLET].stage("k", 1),
        "undeclared": lambda: asset_state[STAGED_OTHER].stage("k", 1),
    }
    refused = {}
    for name, call in cases.items():
        try:
            call()
            refused[name] = "accepted"
        except Exception as error:
            refused[name] = type(error).__name__
    task_state.stage("label", "not a number")
    try:
        task_state.stage_increment("label")
        refused["increment_over_text"] = "accepted"
    except ValueError:
        refused["increment_over_text"] = "ValueError"
    try:
        task_state.get_versioned("label")
        refused["versioned_read_of_staged"] = "accepted"
    except ValueError:
        refused["versioned_read_of_staged"] = "ValueError"
    task_state.stage_delete("label")
    return refused


def _seen_by_a_forked_child(key: str) -> dict:
    """What a process forked from the task process reads of a staged key, and whether it may stage."""
    import json
    import os

    from airflow_task_state import task_state

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        seen: dict = {"read": task_state.get(key)}
        try:
            task_state.stage("from_child", 1)
            seen["stage"] = "accepted"
        except RuntimeError as error:
            seen["stage"] = str(error)
        os.write(write_end, json.dumps(seen).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        seen = json.loads(reader.read())
    os.waitpid(pid, 0)
    return seen


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_staged_writes():
    @task(inlets=[STAGED_INLET], outlets=[STAGED], retries=1, retry_delay=timedelta(seconds=0))
    def advance() -> dict:
        from airflow.sdk import get_current_context
        from airflow_task_state import asset_state, task_state

        try_number = get_current_context()["ti"].try_number
        asset = asset_state[STAGED]
        out: dict = {"try": try_number}
        out["at_start"] = {
            "watermark": asset.get("watermark"),
            "runs": asset.get("runs", 0),
            "task_keys": task_state.keys(),
        }
        if try_number == 1:
            task_state.set("doomed", "written directly, so it is there at once")
        asset.stage("watermark", f"through try {try_number}")
        asset.stage_increment("runs")
        asset.stage_increment("runs", 2)
        task_state.stage(f"staged_by_try_{try_number}", {"try": try_number})
        task_state.stage_delete("doomed")
        task_state.set(f"direct_by_try_{try_number}", try_number)
        out["reads"] = {
            "watermark": asset.get("watermark"),
            "runs": asset.get("runs"),
            "many": asset.get_many(["watermark", "runs", "absent"]),
            "task_keys": task_state.keys(),
            "doomed": task_state.get("doomed", "gone"),
            "staged": task_state.get(f"staged_by_try_{try_number}"),
        }
        if try_number == 1:
            raise RuntimeError("fail try 1 after staging")
        out["refused"] = _refusals()
        out["forked_child"] = _seen_by_a_forked_child(f"staged_by_try_{try_number}")
        return out

    @task(outlets=[STAGED_OTHER])
    def declares_the_other_asset() -> None:
        """Makes the other asset exist, declared by a task that is not `advance`."""

    advance()
    declares_the_other_asset()


state_staged_writes()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_staged_failure():
    @task(outlets=[STAGED])
    def stage_then_fail() -> None:
        from airflow_task_state import asset_state, task_state

        asset_state[STAGED].stage("watermark", "from a failed try")
        asset_state[STAGED].stage_increment("runs", 100)
        task_state.stage("progress", "from a failed try")
        raise RuntimeError("fail after staging")

    stage_then_fail()


state_staged_failure()
