"""
DAGs for the resumable-job mixins' decisions, run with `airflow dags test` (tasks in-process, real
state API, triggers run inline) and, for the failed-job DAG, on the end-to-end deployment.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, dag, task
from airflow_task_state.example_dags import simulated_jobs
from airflow_task_state.example_dags.example_deferrable_resumable_job import DeferrableSimulatedJobOperator


class FirstJobFailsDeferrableOperator(DeferrableSimulatedJobOperator):
    """The run's first job dies without a result after job_seconds, as a cluster job that crashed would."""

    def submit_job(self, context) -> str:
        ti = context["ti"]
        first = not simulated_jobs.submitted(dag_id=ti.dag_id, run_id=ti.run_id)
        submitted_by = {"dag_id": ti.dag_id, "run_id": ti.run_id, "try_number": ti.try_number}
        seconds = context["params"]["job_seconds"]
        return simulated_jobs.submit(seconds, submitted_by, fail=first)


with DAG(
    dag_id="state_deferrable_resubmits_failed_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"crash_first_try": False, "job_seconds": 2.0},
):
    FirstJobFailsDeferrableOperator(
        task_id="run_job", poll_interval=0.2, retries=3, retry_delay=timedelta(seconds=1)
    )


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params={"crash_first_try": False})
def state_deferrable_decisions():
    """
    One task that drives the mixins by hand on its own task state and reports what each step did:
    the decision in every case, what execute raises or returns, and execute_complete's checks.
    """

    @task
    def decide() -> dict:
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import TaskDeferred
        from airflow_task_state import task_state
        from airflow_task_state.example_dags.example_resumable_job import SimulatedJobOperator

        context = get_current_context()
        out: dict = {}

        def jobs() -> list[str]:
            return sorted(path.stem for path in simulated_jobs.jobs_folder().glob("*.submitted"))

        def decision(operator) -> list:
            found = operator.resume_decision(context)
            return [found.action.value, found.job_id, found.reason]

        def deferral(operator) -> dict:
            try:
                returned = operator.execute(context)
            except TaskDeferred as deferred:
                classpath, kwargs = deferred.trigger.serialize()
                return {"method": deferred.method_name, "trigger": classpath, "job_id": kwargs["job_id"]}
            return {"returned": returned}

        def error(call) -> str:
            try:
                call()
            except Exception as raised:
                return f"{type(raised).__name__}: {raised}"
            return "no error"

        operator = DeferrableSimulatedJobOperator(task_id="deferrable", job_seconds=1.5, poll_interval=0.1)
        out["empty"] = decision(operator)
        out["first_execute"] = deferral(operator)
        out["stored_after_submit"] = task_state.get("remote_job_id")
        out["running"] = decision(operator)
        out["second_execute"] = deferral(operator)
        job_id = out["first_execute"]["job_id"]
        out["early_event_refused"] = error(
            lambda: operator.execute_complete(context, event={"status": "running", "job_id": job_id})
        )
        while simulated_jobs.status(job_id) is not simulated_jobs.JobStatus.SUCCEEDED:
            time.sleep(0.1)
        out["succeeded"] = decision(operator)
        out["third_execute"] = deferral(operator)
        out["complete"] = operator.execute_complete(context, event={"status": "succeeded", "job_id": job_id})
        out["failed_event"] = error(
            lambda: operator.execute_complete(context, event={"status": "failed", "job_id": job_id})
        )
        out["other_jobs_event"] = error(
            lambda: operator.execute_complete(context, event={"status": "succeeded", "job_id": "app_other"})
        )
        out["junk_event"] = error(lambda: operator.execute_complete(context, event="done"))
        out["jobs_so_far"] = jobs()

        # A stored job the remote system no longer knows (no process, no result) counts as failed.
        task_state.set("remote_job_id", "app_vanished")
        out["failed"] = decision(operator)
        out["after_failed_execute"] = deferral(operator)
        out["stored_after_resubmit"] = task_state.get("remote_job_id")

        # Resumed from deferral but the id is gone from task state: a clear error, not a new job.
        task_state.delete("remote_job_id")
        out["complete_without_state"] = error(
            lambda: operator.execute_complete(context, event={"status": "succeeded", "job_id": job_id})
        )

        # Item keys: a mapped index re-expanded over another item does not take the other item's job.
        class ItemOperator(DeferrableSimulatedJobOperator):
            def __init__(self, *, item, **kwargs):
                super().__init__(**kwargs)
                self.item = item

            def job_key(self, context):
                return self.item

        for_a = ItemOperator(task_id="item_a", item="s3://bucket/a.csv", job_seconds=30)
        for_b = ItemOperator(task_id="item_b", item="s3://bucket/b.csv", job_seconds=30)
        out["item_a_execute"] = deferral(for_a)
        out["stored_with_item"] = task_state.get("remote_job_id")
        out["item_a_again"] = decision(for_a)
        out["item_b"] = decision(for_b)
        out["item_b_execute"] = deferral(for_b)
        out["item_a_after_b"] = decision(for_a)[0]
        out["bad_key"] = error(lambda: ItemOperator(task_id="bad", item=3).resume_decision(context))
        # An id stored before the operator gave item keys is reconnected to: it may be running.
        task_state.set("remote_job_id", out["item_b_execute"]["job_id"])
        out["bare_id_with_key"] = decision(for_a)[0]
        for job in (out["item_a_execute"]["job_id"], out["item_b_execute"]["job_id"]):
            simulated_jobs.kill(job)

        # The waiting mixin takes the same decision and keeps the item key the same way.
        class SyncItemOperator(SimulatedJobOperator):
            poll_interval = 0.1

            def job_key(self, context):
                return "s3://bucket/c.csv"

        task_state.delete("remote_job_id")
        sync = SyncItemOperator(task_id="sync", job_seconds=0.3)
        out["sync_returned"] = sync.execute(context)
        out["sync_stored"] = task_state.get("remote_job_id")
        out["sync_again"] = decision(sync)[0]
        out["sync_returned_again"] = sync.execute(context)
        out["jobs_total"] = len(jobs())
        task_state.delete("remote_job_id")
        return out

    decide()


state_deferrable_decisions()
