"""
A retried task reconnects to the job it submitted instead of submitting a second one.

With ``crash_first_try`` (the default) try 1 submits the job, stores its id, and its worker
process is then killed hard (SIGKILL: no exception handler, no clean-up). Try 2 finds the job id
in task state and waits for that same job.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator, Param

from airflow_task_state.example_dags import simulated_jobs
from airflow_task_state.resumable import JobStatus, ResumableJobMixin


class SimulatedJobOperator(ResumableJobMixin, BaseOperator):
    poll_interval = 0.5

    def __init__(self, *, job_seconds: float = 3.0, **kwargs):
        super().__init__(**kwargs)
        self.job_seconds = job_seconds

    def submit_job(self, context) -> str:
        return simulated_jobs.submit(self.job_seconds)

    def job_status(self, job_id: str, context) -> JobStatus:
        return simulated_jobs.status(job_id)

    def job_result(self, job_id: str, context) -> str:
        return simulated_jobs.result(job_id)

    def job_stored(self, job_id: str, context) -> None:
        if context["params"]["crash_first_try"] and context["ti"].try_number == 1:
            self.log.warning("Simulating a worker crash: SIGKILL to pid %s", os.getpid())
            os.kill(os.getpid(), signal.SIGKILL)


with DAG(
    dag_id="example_resumable_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"crash_first_try": Param(True, type="boolean")},
    tags=["example", "task-state"],
):
    SimulatedJobOperator(task_id="run_job", retries=2, retry_delay=timedelta(seconds=1))
