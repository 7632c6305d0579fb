"""
Mixins for operators that submit one long-running remote job and must not submit it twice: try 1
stores the job's id in task state before waiting on it, and a retry reconnects to that job unless it
failed. :class:`ResumableJobMixin` waits in the worker, :class:`DeferrableResumableJobMixin` in the
triggerer; both take the same decision at the start of a try (:meth:`ResumableJobBase.resume_decision`).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import TYPE_CHECKING, Any

# Imported with the operator's module, so a try of it starts its handshake as it starts (see
# airflow_task_state.worker.listener): its first call, the stored job id, is the one that matters.
from airflow_task_state import codec
from airflow_task_state.worker.accessors import task_state

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.triggers.base import BaseTrigger


class JobStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ResumeAction(enum.StrEnum):
    """What a try does with the job its task instance may have submitted earlier."""

    #: No usable job: submit a new one (none stored, the stored one failed, or it is another item's).
    SUBMIT = "submit"
    #: The stored job is still running: wait for it (or defer on it).
    RECONNECT = "reconnect"
    #: The stored job has already succeeded: return its result without waiting.
    ALREADY_SUCCEEDED = "already_succeeded"


@dataclasses.dataclass(frozen=True)
class ResumeDecision:
    action: ResumeAction
    #: The job to reconnect to, or the one found but not usable when the action is SUBMIT (None when
    #: nothing was stored).
    job_id: Any
    #: Why, in words, for the task log.
    reason: str


# The stored value when the operator gives an item key (job_key): the job id and the item it was
# submitted for. Without an item key the stored value is the bare job id, as it always was.
_JOB_ID_FIELD = "job_id"
_JOB_KEY_FIELD = "job_key"


class ResumableJobBase:
    """
    What both mixins share: the stored job id, the item key, status parsing and the decision a try
    takes at its start. Use :class:`ResumableJobMixin` or :class:`DeferrableResumableJobMixin`.
    """

    log: Any  # the operator base class's logger

    #: Task-state key holding the submitted job's id.
    job_id_key: str = "remote_job_id"

    def submit_job(self, context: Any) -> Any:
        """Start the remote job; return its id (a string, or any JSON value)."""
        raise NotImplementedError

    def job_status(self, job_id: Any, context: Any) -> JobStatus | str:
        """Where the remote job stands now: a :class:`JobStatus`, or its value (``"running"``, ...)."""
        raise NotImplementedError

    def job_result(self, job_id: Any, context: Any) -> Any:
        """What the task returns once the job succeeded."""
        return job_id

    def job_stored(self, job_id: Any, context: Any) -> None:
        """Called once a newly submitted job's id is safe in task state (a hook; does nothing)."""

    def job_key(self, context: Any) -> str | None:
        """
        A stable key naming the item this task instance works on (a file, a partition; not the map
        index), or None: the job id is stored with it, and a try whose item differs from the stored
        job's submits its own job, as when a clear re-expands a mapped task over another list.
        """
        return None

    # -- the decision -----------------------------------------------------------------------------

    def resume_decision(self, context: Any) -> ResumeDecision:
        """
        Read task state and decide: reconnect to the stored job, return its result, or submit.

        Asks the remote system (:meth:`job_status`) once when a job is stored; writes nothing.
        """
        stored = task_state.get(self.job_id_key)
        if stored is None:
            return ResumeDecision(ResumeAction.SUBMIT, None, "no job stored in task state")
        job_id, stored_item = self._unpack(stored)
        item = self._checked_job_key(context)
        if item is not None and stored_item is not None and stored_item != item:
            return ResumeDecision(
                ResumeAction.SUBMIT,
                job_id,
                f"stored job {job_id} was submitted for item {stored_item!r}, this try works on {item!r}",
            )
        status = self._status(job_id, context)
        if status is JobStatus.FAILED:
            return ResumeDecision(ResumeAction.SUBMIT, job_id, f"stored job {job_id} failed")
        if status is JobStatus.SUCCEEDED:
            return ResumeDecision(ResumeAction.ALREADY_SUCCEEDED, job_id, f"stored job {job_id} succeeded")
        return ResumeDecision(ResumeAction.RECONNECT, job_id, f"stored job {job_id} is running")

    def stored_job_id(self, context: Any) -> Any:
        """The job id in task state (None if there is none), without asking the remote system."""
        stored = task_state.get(self.job_id_key)
        return None if stored is None else self._unpack(stored)[0]

    def _job_to_follow(self, context: Any) -> tuple[Any, ResumeAction]:
        """The job this try follows: the stored one (see :meth:`resume_decision`), or one submitted now."""
        decision = self.resume_decision(context)
        if decision.action is not ResumeAction.SUBMIT:
            return decision.job_id, decision.action
        if decision.job_id is not None:
            self.log.info("%s; submitting a new one", decision.reason[:1].upper() + decision.reason[1:])
        item = self._checked_job_key(context)
        job_id = self.submit_job(context)
        if job_id is None:
            raise ValueError(f"{type(self).__name__}.submit_job returned None; return the new job's id")
        # Written at once, never held back: a try killed from here on must find the id.
        task_state.set(
            self.job_id_key, job_id if item is None else {_JOB_ID_FIELD: job_id, _JOB_KEY_FIELD: item}
        )
        self.log.info("Submitted job %s and stored its id in task state", job_id)
        self.job_stored(job_id, context)
        return job_id, ResumeAction.SUBMIT

    def _checked_job_key(self, context: Any) -> str | None:
        item = self.job_key(context)
        if item is not None and not isinstance(item, str):
            raise TypeError(
                f"{type(self).__name__}.job_key returned {item!r} ({type(item).__name__}); "
                "return a string that names the item, or None"
            )
        return item

    @staticmethod
    def _unpack(stored: Any) -> tuple[Any, str | None]:
        """(job id, item key) from a stored value: a bare id, or the id with the item it was for."""
        if isinstance(stored, dict) and set(stored) == {_JOB_ID_FIELD, _JOB_KEY_FIELD}:
            return stored[_JOB_ID_FIELD], stored[_JOB_KEY_FIELD]
        return stored, None

    def _status(self, job_id: Any, context: Any) -> JobStatus:
        """:meth:`job_status` as a :class:`JobStatus`; anything that is not one of its values is refused."""
        return self._parse_status(self.job_status(job_id, context), job_id, "job_status")

    def _parse_status(self, status: Any, job_id: Any, source: str) -> JobStatus:
        try:
            return JobStatus(status)
        except (ValueError, TypeError):
            allowed = ", ".join(repr(member.value) for member in JobStatus)
            raise ValueError(
                f"{type(self).__name__}.{source} returned {status!r} for job {job_id}; "
                f"expected a JobStatus or one of {allowed}"
            ) from None


class ResumableJobMixin(ResumableJobBase):
    """
    Put it before the operator base class and implement :meth:`submit_job`, :meth:`job_status`
    and :meth:`job_result`::

        class SparkSubmitOperator(ResumableJobMixin, BaseOperator):
            def submit_job(self, context): return client.submit(self.application)
            def job_status(self, job_id, context): return JobStatus(client.status(job_id))
            def job_result(self, job_id, context): return client.output(job_id)

    ``execute`` then does the rest. The job id lives in task state under :attr:`job_id_key`.
    """

    #: Seconds between two status checks while waiting.
    poll_interval: float = 1.0

    def execute(self, context: Any) -> Any:
        job_id, action = self._job_to_follow(context)
        if action is ResumeAction.ALREADY_SUCCEEDED:
            self.log.info("Reconnecting to job %s (succeeded) from an earlier try", job_id)
            return self.job_result(job_id, context)
        if action is ResumeAction.RECONNECT:
            self.log.info("Reconnecting to job %s (running) from an earlier try", job_id)
        while (status := self._status(job_id, context)) is JobStatus.RUNNING:
            time.sleep(self.poll_interval)
        if status is JobStatus.FAILED:
            raise RuntimeError(f"remote job {job_id} failed")
        return self.job_result(job_id, context)


class DeferrableResumableJobMixin(ResumableJobBase):
    """
    The deferrable form: the wait runs in the triggerer, not in a worker slot. Implement what
    :class:`ResumableJobMixin` needs, and :meth:`job_trigger`. The job id goes to task state *before*
    the task defers; ``execute_complete`` reads it back. The trigger yields one
    ``TriggerEvent({"status": "succeeded" | "failed", ...})`` and never uses task state (the
    triggerer has no credential); the triggerer imports it from an installed package.
    """

    #: How long the task may stay deferred before it fails (None: no limit).
    trigger_timeout: timedelta | None = None

    defer: Any  # BaseOperator.defer, which raises TaskDeferred

    def job_trigger(self, job_id: Any, context: Any) -> BaseTrigger:
        """A trigger that watches *job_id* and yields one event when it has finished."""
        raise NotImplementedError

    def job_event_status(self, job_id: Any, event: Any) -> JobStatus | str:
        """
        The outcome in the trigger's event. By default the event is a dict with ``status``
        (a :class:`JobStatus` value); override this to read another trigger's events.
        """
        if not isinstance(event, dict) or "status" not in event:
            raise ValueError(
                f"{type(self).__name__} resumed with event {event!r} for job {job_id}; expected a dict with "
                "'status' (override job_event_status to read another trigger's events)"
            )
        return event["status"]  # type: ignore[no-any-return]

    def execute(self, context: Any) -> Any:
        job_id, action = self._job_to_follow(context)
        if action is ResumeAction.ALREADY_SUCCEEDED:
            self.log.info("Job %s from an earlier try has succeeded; not deferring", job_id)
            return self.job_result(job_id, context)
        if action is ResumeAction.RECONNECT:
            self.log.info("Reconnecting to job %s (running) from an earlier try; deferring", job_id)
        self.log.info("Deferring on job %s", job_id)
        self.defer(
            trigger=self.job_trigger(job_id, context),
            method_name="execute_complete",
            timeout=self.trigger_timeout,
        )

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        job_id = self.stored_job_id(context)
        if job_id is None:
            raise RuntimeError(
                f"{type(self).__name__} resumed from deferral but task state has no {self.job_id_key!r}: "
                "it was deleted while the task was deferred; the next try submits a new job"
            )
        status = self._parse_status(self.job_event_status(job_id, event), job_id, "job_event_status")
        if isinstance(event, dict) and "job_id" in event and not _same_job(event["job_id"], job_id):
            raise RuntimeError(
                f"the trigger reported on job {event['job_id']}, but task state now holds job {job_id}; "
                "the next try decides from task state"
            )
        self.log.info("Resumed after deferral: job %s (from task state) %s", job_id, status.value)
        if status is JobStatus.FAILED:
            raise RuntimeError(f"remote job {job_id} failed")
        if status is JobStatus.RUNNING:
            raise RuntimeError(f"the trigger fired while job {job_id} is still running")
        return self.job_result(job_id, context)


def _same_job(reported: Any, stored: Any) -> bool:
    """
    Whether the trigger reported on the job task state holds. Compared as JSON, as task state keeps
    it: a tuple id comes back from task state as a list, while the trigger's event keeps the tuple.
    """
    try:
        return codec.decode(codec.encode(reported)) == stored
    except (TypeError, ValueError):  # not storable: not the id task state holds
        return False
