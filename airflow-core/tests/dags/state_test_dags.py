"""DAGs the task-state tests run with `airflow dags test`."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, dag, task

DECLARED = Asset(name="state_tests_declared", uri="file:///tmp/state-tests/declared")
UNDECLARED = Asset(name="state_tests_undeclared", uri="file:///tmp/state-tests/undeclared")
INLET_ONLY = Asset(name="state_tests_inlet_only", uri="file:///tmp/state-tests/inlet-only")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_shared_across_tries():
    @task(retries=1, retry_delay=timedelta(seconds=0))
    def remember() -> dict:
        from airflow.sdk import get_current_context
        from airflow_task_state import task_state

        try_number = get_current_context()["ti"].try_number
        stored = task_state.get("job")
        if stored is None:
            task_state.set("job", {"id": "app_001", "submitted_by_try": try_number})
            raise RuntimeError("fail try 1 after storing the job")
        return {"try": try_number, "stored": stored}

    remember()


state_shared_across_tries()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_api_surface():
    @task(inlets=[INLET_ONLY], outlets=[DECLARED])
    def exercise() -> dict:
        from airflow_task_state import asset_state, task_state

        out: dict = {}
        task_state.set("dict", {"nested": [1, 2.5, "ü", True]})
        task_state.set("zero", 0)
        task_state.set("empty", "")
        task_state.set("a/b c%d", "odd key")
        out["round_trip"] = [task_state.get(k) for k in ("dict", "zero", "empty", "a/b c%d")]
        out["default"] = task_state.get("missing", default="fallback")
        out["keys"] = task_state.keys()
        task_state.delete("zero")
        task_state.delete("never-set")
        out["after_delete"] = task_state.keys()
        for bad in (None, float("nan"), float("inf"), {"x": object()}, "x" * 70_000):
            try:
                task_state.set("bad", bad)
                out.setdefault("accepted", []).append(repr(bad)[:20])
            except (ValueError, TypeError) as error:
                out.setdefault("refused", []).append(type(error).__name__)
        asset_state[DECLARED].set("watermark", 7)
        out["by_name"] = asset_state["state_tests_declared"].get("watermark")
        out["by_uri"] = asset_state["file:///tmp/state-tests/declared"].get("watermark")
        try:
            asset_state[UNDECLARED].get("watermark")
        except PermissionError as error:
            out["undeclared"] = str(error)
        out["inlet_read"] = asset_state[INLET_ONLY].get("watermark", default="unset")
        try:
            asset_state[INLET_ONLY].set("watermark", 1)
        except PermissionError as error:
            out["inlet_write"] = str(error)
        out.update(_batches(task_state, asset_state[DECLARED]))
        task_state.clear()
        out["after_clear"] = task_state.keys()
        task_state.set("kept", "for the test to read")
        return out

    @task(outlets=[UNDECLARED])
    def declares_the_other_asset() -> None:
        """Makes the other asset exist, declared by a task that is not `exercise`."""

    exercise()
    declares_the_other_asset()


state_api_surface()


def _batches(task_state, watermarks) -> dict:
    """get_many / set_many / delete_many, sync and async, each one request."""
    import asyncio

    from airflow_task_state.worker.client import StateClient

    out: dict = {}
    sent: list[str] = []
    send = StateClient._send

    def counting(self, method, path, **kwargs):
        sent.append(f"{method} {path.rsplit('/', 2)[-2:]}")
        return send(self, method, path, **kwargs)

    StateClient._send = counting
    try:
        offsets = {f"partition-{n}": n * 1000 for n in range(100)}
        out["batch_versions"] = sorted(set(task_state.set_many(offsets).values()))
        out["batch_read_back"] = task_state.get_many([*offsets, "absent"]) == offsets
        task_state.delete_many([f"partition-{n}" for n in range(50)])
        out["batch_requests"] = len(sent)
    finally:
        StateClient._send = send
    out["batch_left"] = len(task_state.get_many(list(offsets)))
    try:
        task_state.set_many({"partition-99": 1, "bad": None})
    except (TypeError, ValueError) as error:
        out["batch_refused"] = str(error)
    out["batch_after_refusal"] = task_state.get_many(["partition-99", "bad"])
    watermarks.set_many({"low": 1, "high": 9})
    out["asset_batch"] = watermarks.get_many(["low", "high", "none"])
    watermarks.delete_many(["low", "high"])
    out["asset_batch_after_delete"] = watermarks.get_many(["low", "high"])

    async def in_async_code():
        await task_state.aset_many({"a": [1], "b": {"c": None}})
        await task_state.adelete_many(["a"])
        return await task_state.aget_many(["a", "b"])

    out["async_batch"] = asyncio.run(in_async_code())
    task_state.delete_many([*offsets, "b"])
    return out


with DAG(dag_id="state_resubmits_failed_job", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    from airflow_task_state.example_dags import simulated_jobs
    from airflow_task_state.example_dags.example_resumable_job import SimulatedJobOperator

    class FirstJobFailsOperator(SimulatedJobOperator):
        """The first job submitted dies without a result, as a cluster job that crashed would."""

        def submit_job(self, context) -> str:
            first = not any(simulated_jobs.jobs_folder().glob("*.submitted"))
            return simulated_jobs.submit(-1 if first else self.job_seconds)  # sleep(-1) raises

    FirstJobFailsOperator(
        task_id="run_job",
        job_seconds=0.5,
        retries=1,
        retry_delay=timedelta(seconds=0),
        params={"crash_first_try": False},
    )
