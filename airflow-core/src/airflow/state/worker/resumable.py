"""
A mixin for operators that submit one long-running remote job and must not submit it twice.

Try 1 submits the job and stores its id in task state before waiting on it. If the worker dies,
try 2 finds the id, asks the remote system how the job is doing, and reconnects to it; only a job
that failed terminally is submitted again. The result is the same either way.
"""

from __future__ import annotations

import enum
import time
from typing import Any

# Imported with the operator's module, so a try of it starts its handshake as it starts (see
# airflow.state.worker.listener): its first call, the stored job id, is the one that matters.
from airflow.state.worker.accessors import task_state


class JobStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ResumableJobMixin:
    """
    Put it before the operator base class and implement :meth:`submit_job`, :meth:`job_status`
    and :meth:`job_result`::

        class SparkSubmitOperator(ResumableJobMixin, BaseOperator):
            def submit_job(self, context): return client.submit(self.application)
            def job_status(self, job_id, context): return JobStatus(client.status(job_id))
            def job_result(self, job_id, context): return client.output(job_id)

    ``execute`` then does the rest. The job id lives in task state under :attr:`job_id_key`.
    """

    log: Any  # the operator base class's logger

    #: Task-state key holding the submitted job's id.
    job_id_key: str = "remote_job_id"
    #: Seconds between two status checks while waiting.
    poll_interval: float = 1.0

    def submit_job(self, context: Any) -> str:
        """Start the remote job; return its id."""
        raise NotImplementedError

    def job_status(self, job_id: str, context: Any) -> JobStatus | str:
        """Where the remote job stands now: a :class:`JobStatus`, or its value (``"running"``, ...)."""
        raise NotImplementedError

    def job_result(self, job_id: str, context: Any) -> Any:
        """What the task returns once the job succeeded."""
        return job_id

    def job_stored(self, job_id: str, context: Any) -> None:
        """Called once a newly submitted job's id is safe in task state (a hook; does nothing)."""

    def execute(self, context: Any) -> Any:
        job_id = task_state.get(self.job_id_key)
        if job_id is not None:
            status = self._status(job_id, context)
            if status is JobStatus.FAILED:
                self.log.info("Stored job %s failed; submitting a new one", job_id)
                job_id = None
            else:
                self.log.info("Reconnecting to job %s (%s) from an earlier try", job_id, status.value)
        if job_id is None:
            job_id = self.submit_job(context)
            task_state.set(self.job_id_key, job_id)
            self.log.info("Submitted job %s and stored its id in task state", job_id)
            self.job_stored(job_id, context)
        return self._wait(job_id, context)

    def _wait(self, job_id: str, context: Any) -> Any:
        while (status := self._status(job_id, context)) is JobStatus.RUNNING:
            time.sleep(self.poll_interval)
        if status is JobStatus.FAILED:
            raise RuntimeError(f"remote job {job_id} failed")
        return self.job_result(job_id, context)

    def _status(self, job_id: str, context: Any) -> JobStatus:
        """:meth:`job_status` as a :class:`JobStatus`; anything that is not one of its values is refused."""
        status = self.job_status(job_id, context)
        try:
            return JobStatus(status)
        except (ValueError, TypeError):
            allowed = ", ".join(repr(member.value) for member in JobStatus)
            raise ValueError(
                f"{type(self).__name__}.job_status returned {status!r} for job {job_id}; "
                f"expected a JobStatus or one of {allowed}"
            ) from None
