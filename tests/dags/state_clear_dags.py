"""
DAGs of the clear end-to-end tests (tests/task_features/test_e2e_clears.py): each runs a resumable job
operator that counts the jobs it submits, one DAG per way of clearing it, so that all run side by side.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator, task
from airflow_task_state.example_dags import simulated_jobs
from airflow_task_state.worker.resumable import JobStatus, ResumableJobMixin


class CountedJobOperator(ResumableJobMixin, BaseOperator):
    """Submits a short simulated job, and leaves a ``<dag>.<run>.<task>.<job>.count`` file per job."""

    poll_interval = 0.3

    def __init__(self, *, job_seconds: float = 1.5, fail_first_try: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.job_seconds = job_seconds
        self.fail_first_try = fail_first_try

    def submit_job(self, context) -> str:
        job_id = simulated_jobs.submit(self.job_seconds)
        ti = context["ti"]
        (simulated_jobs.jobs_folder() / f"{ti.dag_id}.{ti.run_id}.{ti.task_id}.{job_id}.count").write_text("")
        return job_id

    def job_status(self, job_id: str, context) -> JobStatus:
        return simulated_jobs.status(job_id)

    def job_result(self, job_id: str, context) -> str:
        return simulated_jobs.result(job_id)

    def job_stored(self, job_id: str, context) -> None:
        # The worker fails (its job still running) once the id is stored.
        if self.fail_first_try and context["ti"].try_number == 1:
            raise RuntimeError(f"failing try 1 with job {job_id} still running")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)


RETRY = {"retries": 1, "retry_delay": timedelta(seconds=1)}

# A try that fails with a retry left: the retry reconnects.
with _dag("clear_e2e_retry"):
    CountedJobOperator(task_id="job", fail_first_try=True, **RETRY)

# Cleared after success: through clearTaskInstances, the dag run clear, the CLI, as a downstream.
for path in ("rest", "dag_run", "cli", "views"):
    with _dag(f"clear_e2e_{path}"):
        CountedJobOperator(task_id="job", **RETRY)

with _dag("clear_e2e_downstream"):

    @task
    def start() -> None:
        return None

    start() >> CountedJobOperator(task_id="job", **RETRY)

# The task keeps its state on a clear after success: set on the task in the DAG file.
with _dag("clear_e2e_keep_always"):
    CountedJobOperator(task_id="job", **RETRY).keep_task_state = "always"


class NeverKeptJobOperator(CountedJobOperator):
    """An operator whose author chose: a clear always submits a new job (a class attribute)."""

    keep_task_state = "never"


# Failed with no retry left while its job runs: cleared, the new try reconnects (or, with never,
# submits again).
with _dag("clear_e2e_failure"):
    CountedJobOperator(task_id="job", fail_first_try=True, retries=0)

with _dag("clear_e2e_failure_never"):
    NeverKeptJobOperator(task_id="job", fail_first_try=True, retries=0)
