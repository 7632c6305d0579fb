"""
Writes a task try stages and a backend applies together once the try has succeeded (a commit).

A commit is applied at most once per ``commit_id`` (the try's task instance id): it records the id,
in the same atomic step as its writes, where no clear reaches, so a request retried after its reply
was lost applies nothing twice, even after the task state was cleared in between (clear on success,
the task's own ``clear()``, an operator's clear, the discard a clear leaves for the next try). The
default record is key ``commit_id`` of :func:`commit_records_scope`: a task scope of the committing
try's dag run that no task instance can name, deleted with the run like all its task state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from .many import validate_batch_size
from .scopes import StateScope, TaskScope
from .validation import validate_key, validate_scope, validate_value
from .writes import StateWriter, validate_increment, validate_write

#: The task id of :func:`commit_records_scope`. Airflow refuses ``:`` in task ids (they match
#: ``^[\w.-]+$``), so no task instance can read, write or clear this scope, nor any clear of one reach it.
COMMIT_RECORDS_TASK_ID = "airflow:staged-commits"
#: The task-state key where releases up to 0.7 recorded a commit, in the committing task
#: instance's own scope (records expire within the hour). Still refused as a key task code stages.
COMMIT_KEY = "airflow.staged_commit"
#: How long a commit's record lives: far longer than any retry of a commit request takes.
COMMIT_RECORD_SECONDS = 3600
#: Longest commit id: a UUID is 36 characters.
MAX_COMMIT_ID_LENGTH = 200


def commit_records_scope(scope: TaskScope) -> TaskScope:
    """The scope where the commits of tries of *scope*'s dag run record themselves, each under its id."""
    if not isinstance(scope, TaskScope):
        raise TypeError(f"commit records belong to a dag run: a TaskScope, got {type(scope).__name__}")
    return TaskScope(scope.dag_id, scope.run_id, COMMIT_RECORDS_TASK_ID, -1, scope.dag_run_uid)


def is_commit_records_scope(scope: object) -> bool:
    """Whether *scope* is a :func:`commit_records_scope`: bookkeeping, never a task instance's state."""
    return isinstance(scope, TaskScope) and scope.task_id == COMMIT_RECORDS_TASK_ID


class StagedOp(StrEnum):
    """What a staged write does to its key when the commit is applied."""

    SET = "set"
    DELETE = "delete"
    INCREMENT = "increment"


@dataclass(frozen=True)
class StagedWrite:
    """One key's write in a commit: store *value*, delete the key, or add *by* to its integer."""

    scope: StateScope
    key: str
    op: StagedOp
    value: str | None = None
    by: int = 1
    expires_at: datetime | None = None

    def __post_init__(self) -> None:
        validate_scope(self.scope)
        validate_key(self.key)
        object.__setattr__(self, "op", StagedOp(self.op))
        validate_write(None, self.expires_at)
        if self.op is StagedOp.SET:
            validate_value(self.value)
        elif self.value is not None:
            raise ValueError(f"a staged {self.op.value} of key {self.key!r:.60} carries no value")
        if self.op is StagedOp.INCREMENT:
            validate_increment(self.by)
        if self.op is StagedOp.DELETE and self.expires_at is not None:
            raise ValueError(f"a staged delete of key {self.key!r:.60} has no expiry")


@dataclass(frozen=True)
class StagedCommit:
    """
    Every write one try staged, applied by :meth:`BaseStateBackend.apply_commit`: at most one write
    per key of a scope, none to :data:`COMMIT_KEY` in the *ledger* (the try's own task scope) nor to
    a :func:`commit_records_scope`. The commit records itself under key *commit_id* of
    :attr:`record_scope`.
    """

    commit_id: str
    ledger: TaskScope
    writes: tuple[StagedWrite, ...]
    writer: StateWriter | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.commit_id, str) or not 0 < len(self.commit_id) <= MAX_COMMIT_ID_LENGTH:
            raise ValueError(
                f"commit_id must be a string of 1 to {MAX_COMMIT_ID_LENGTH} characters, "
                f"got {self.commit_id!r:.60}"
            )
        validate_key(self.commit_id)  # the key of its record
        if not isinstance(self.ledger, TaskScope):
            raise TypeError(f"ledger must be a TaskScope, got {type(self.ledger).__name__}")
        if is_commit_records_scope(self.ledger):
            raise ValueError("a commit's ledger is the committing task instance's scope, not its records'")
        object.__setattr__(self, "writes", tuple(self.writes))
        validate_batch_size(len(self.writes), "a commit")
        validate_write(self.writer, None)
        seen = set()
        for write in self.writes:
            if not isinstance(write, StagedWrite):
                raise TypeError(f"a commit holds StagedWrite objects, got {type(write).__name__}")
            if (write.scope, write.key) in seen:
                raise ValueError(f"a commit writes key {write.key!r:.60} of one scope twice")
            seen.add((write.scope, write.key))
            if write.scope == self.ledger and write.key == COMMIT_KEY:
                raise ValueError(f"key {COMMIT_KEY!r} is reserved; use another key")
            if is_commit_records_scope(write.scope):
                raise ValueError(f"task id {COMMIT_RECORDS_TASK_ID!r} is where commits record themselves")

    @property
    def record_scope(self) -> TaskScope:
        """Where this commit records itself, under key :attr:`commit_id` (:func:`commit_records_scope`)."""
        return commit_records_scope(self.ledger)

    def in_lock_order(self) -> list[StagedWrite]:
        """The writes in one order for every commit, so concurrent commits lock shared keys alike."""
        return sorted(self.writes, key=lambda write: (repr(write.scope), write.key))
