"""
Mixins for operators that submit one long-running remote job and must not submit it twice.

Try 1 submits the job and stores its id in task state before waiting on it. If the worker dies,
try 2 finds the id, asks the remote system how the job is doing, and reconnects to it; only a job
that failed terminally is submitted again. The result is the same either way.

:class:`ResumableJobMixin` waits in the worker (a polling loop); :class:`DeferrableResumableJobMixin`
hands the wait to the triggerer (``self.defer``) and frees the worker slot. Both take the same
decision at the start of a try, :meth:`ResumableJobBase.resume_decision`.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import TYPE_CHECKING, Any

# Imported with the operator's module, so a try of it starts its handshake as it starts (see
# airflow.state.worker.listener): its first call, the stored job id, is the one that matters.
from airflow.state.worker.accessors import task_state

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
        A stable key for the item this task instance works on, or None (the default).

        Mapped task instances are told apart by their index, and a clear that re-expands the task
        over another list gives index N another item. With a key, the job id is stored together
        with it, and a try whose item differs from the stored job's submits its own job instead of
        reconnecting to the other item's. Return something that names the item, e.g. the file or
        partition the instance processes, not the map index.
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

    def _submit_and_store(self, context: Any) -> Any:
        """Submit a job, put its id in task state, then call :meth:`job_stored`."""
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
        return job_id

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
        decision = self.resume_decision(context)
        if decision.action is ResumeAction.SUBMIT:
            if decision.job_id is not None:
                self.log.info("%s; submitting a new one", _capitalized(decision.reason))
            job_id = self._submit_and_store(context)
        else:
            job_id = decision.job_id
            status = "running" if decision.action is ResumeAction.RECONNECT else "succeeded"
            self.log.info("Reconnecting to job %s (%s) from an earlier try", job_id, status)
            if decision.action is ResumeAction.ALREADY_SUCCEEDED:
                return self.job_result(job_id, context)
        return self._wait(job_id, context)

    def _wait(self, job_id: Any, context: Any) -> Any:
        while (status := self._status(job_id, context)) is JobStatus.RUNNING:
            time.sleep(self.poll_interval)
        if status is JobStatus.FAILED:
            raise RuntimeError(f"remote job {job_id} failed")
        return self.job_result(job_id, context)


class DeferrableResumableJobMixin(ResumableJobBase):
    """
    The deferrable form: the wait runs in the triggerer, not in a worker slot. Implement
    :meth:`submit_job`, :meth:`job_status`, :meth:`job_trigger` and :meth:`job_result`::

        class EmrStepOperator(DeferrableResumableJobMixin, BaseOperator):
            def submit_job(self, context): return emr.add_step(self.step)
            def job_status(self, job_id, context): return JobStatus(emr.status(job_id))
            def job_trigger(self, job_id, context): return EmrStepTrigger(job_id=job_id)
            def job_result(self, job_id, context): return emr.output(job_id)

    ``execute`` takes :meth:`resume_decision`: a stored job that succeeded gives its result at once,
    one still running is deferred on again, and only when there is none (or it failed) is a job
    submitted; its id goes to task state *before* the task defers. ``execute_complete`` runs when
    the trigger fires, in the same try, and reads the job id back from task state.

    The trigger runs in the triggerer, which has no task-state credential: it watches the job and
    yields one ``TriggerEvent({"status": "succeeded" | "failed", ...})``; it never uses task state.
    Its class must be importable by the triggerer (an installed package, not the DAG folder).
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
        decision = self.resume_decision(context)
        if decision.action is ResumeAction.ALREADY_SUCCEEDED:
            self.log.info("Job %s from an earlier try has succeeded; not deferring", decision.job_id)
            return self.job_result(decision.job_id, context)
        if decision.action is ResumeAction.RECONNECT:
            self.log.info("Reconnecting to job %s (running) from an earlier try; deferring", decision.job_id)
            job_id = decision.job_id
        else:
            if decision.job_id is not None:
                self.log.info("%s; submitting a new one", _capitalized(decision.reason))
            job_id = self._submit_and_store(context)
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
        if isinstance(event, dict) and "job_id" in event and event["job_id"] != job_id:
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


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]
