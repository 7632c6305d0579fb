"""A ResumableJobMixin operator whose ``job_status`` returns plain strings, as a remote API's would."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, BaseOperator
from airflow_task_state.worker.resumable import ResumableJobMixin


class PlainStatusOperator(ResumableJobMixin, BaseOperator):
    """
    The job reports the string ``"running"`` for its first ``running_polls`` status checks, then
    ``final_status``. With ``fail_first_try`` try 1 fails once the job id is stored, so try 2
    reconnects to the job.
    """

    poll_interval = 0.05

    def __init__(
        self, *, running_polls: int, final_status: str, fail_first_try: bool = False, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.running_polls = running_polls
        self.final_status = final_status
        self.fail_first_try = fail_first_try
        self.polls = 0

    def submit_job(self, context) -> str:
        return f"job-{context['ti'].task_id}"

    def job_stored(self, job_id: str, context) -> None:
        if self.fail_first_try and context["ti"].try_number == 1:
            raise RuntimeError("fail try 1 after storing the job")

    def job_status(self, job_id: str, context) -> str:
        self.polls += 1
        return "running" if self.polls <= self.running_polls else self.final_status

    def job_result(self, job_id: str, context) -> str:
        try_number = context["ti"].try_number
        self.log.info("Job %s done after %d status checks on try %d", job_id, self.polls, try_number)
        return job_id


with DAG(
    dag_id="state_resumable_plain_status", schedule=None, start_date=datetime(2026, 1, 1), catchup=False
):
    PlainStatusOperator(
        task_id="reconnects",
        running_polls=3,
        final_status="succeeded",
        fail_first_try=True,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
    PlainStatusOperator(task_id="unknown_status", running_polls=1, final_status="lost")
