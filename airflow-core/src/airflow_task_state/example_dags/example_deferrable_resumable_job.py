"""
A deferrable task whose worker dies between submitting its job and deferring defers on that same
job on its retry, instead of submitting a second one.

The task submits a (simulated) remote job, stores the job id in task state, and defers to
SimulatedJobTrigger, which watches the job in the triggerer; ``execute_complete`` reads the job id
back from task state and returns the job's result. With ``crash_first_try`` (the default) try 1's
worker process is killed hard (SIGKILL) after the job id is stored and before the task defers. Try 2
finds the id in task state and defers on that job. Needs a running ``airflow triggerer``.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator, Param

from airflow_task_state.example_dags import simulated_jobs
from airflow_task_state.resumable import DeferrableResumableJobMixin, JobStatus


class DeferrableSimulatedJobOperator(DeferrableResumableJobMixin, BaseOperator):
    def __init__(self, *, job_seconds: float = 3.0, poll_interval: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.job_seconds = job_seconds
        self.poll_interval = poll_interval

    def submit_job(self, context) -> str:
        ti = context["ti"]
        # Who submitted it, so that tests can count one task instance's jobs.
        submitted_by = {"dag_id": ti.dag_id, "run_id": ti.run_id, "try_number": ti.try_number}
        return simulated_jobs.submit(context["params"].get("job_seconds", self.job_seconds), submitted_by)

    def job_status(self, job_id: str, context) -> JobStatus:
        return simulated_jobs.status(job_id)

    def job_trigger(self, job_id: str, context) -> simulated_jobs.SimulatedJobTrigger:
        return simulated_jobs.SimulatedJobTrigger(job_id, poll_interval=self.poll_interval)

    def job_result(self, job_id: str, context) -> str:
        return simulated_jobs.result(job_id)

    def job_stored(self, job_id: str, context) -> None:
        if context["params"]["crash_first_try"] and context["ti"].try_number == 1:
            self.log.warning("Simulating a worker crash before deferring: SIGKILL to pid %s", os.getpid())
            os.kill(os.getpid(), signal.SIGKILL)


with DAG(
    dag_id="example_deferrable_resumable_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "crash_first_try": Param(True, type="boolean"),
        "job_seconds": Param(3.0, type="number", description="how long the simulated job runs"),
    },
    tags=["example", "task-state"],
):
    DeferrableSimulatedJobOperator(task_id="run_job", retries=3, retry_delay=timedelta(seconds=1))
