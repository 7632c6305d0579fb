"""What a write carries beside the value (writer, expiry, expected version), and its errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

#: Increments work on 64-bit signed integers, the widest integer every SQL database stores exactly.
MIN_COUNTER = -(2**63)
MAX_COUNTER = 2**63 - 1


class WriterKind(StrEnum):
    """Who made a write: a task try, an operator through the REST API, or one on the command line."""

    TASK = "task"
    API = "api"
    CLI = "cli"


#: Map indexes and try numbers are 32-bit columns in Airflow.
MAX_TASK_NUMBER = 2**31 - 1
_TASK_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")


@dataclass(frozen=True)
class StateWriter:
    """
    Who writes a value: task state records the try, asset state the whole writer. A ``task`` writer
    names its task instance and try (all required); the others name none, else it is not built.
    """

    kind: WriterKind
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None

    @property
    def task_instance_and_try(self) -> tuple[str | None, str | None, str | None, int | None, int | None]:
        """(dag_id, run_id, task_id, map_index, try_number): ``dataclasses.astuple`` would deep-copy them."""
        return self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number

    def __post_init__(self) -> None:
        # Checked here, the one place every writer passes through, so no backend can store a writer
        # that `airflow state export` would write and `import` refuse.
        try:
            kind = WriterKind(self.kind)
        except ValueError:
            kinds = ", ".join(kind.value for kind in WriterKind)
            raise ValueError(f"kind of a writer must be one of {kinds}, not {self.kind!r}") from None
        object.__setattr__(self, "kind", kind)
        fields = {name: getattr(self, name) for name in _TASK_FIELDS}
        if kind is not WriterKind.TASK:
            named = [name for name, value in fields.items() if value is not None]
            if named:
                raise ValueError(
                    f"a {kind.value} writer names no task instance, but {', '.join(named)} is set"
                )
            return
        for name in ("dag_id", "run_id", "task_id"):
            text = fields[name]
            if text is not None and not isinstance(text, str):
                raise TypeError(f"{name} of a task writer must be a non-empty string, not {text!r:.60}")
            if not text:
                raise ValueError(f"{name} of a task writer must be a non-empty string, not {text!r}")
        for name, low in (("map_index", -1), ("try_number", 0)):
            number = fields[name]
            wrong = (
                f"{name} of a task writer must be an int from {low} to {MAX_TASK_NUMBER}, not {number!r:.60}"
            )
            if number is not None and (not isinstance(number, int) or isinstance(number, bool)):
                raise TypeError(wrong)
            if number is None or not low <= number <= MAX_TASK_NUMBER:
                raise ValueError(wrong)

    @classmethod
    def task_try(cls, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> StateWriter:
        return cls(WriterKind.TASK, dag_id, run_id, task_id, map_index, try_number)

    def __str__(self) -> str:
        if self.kind is not WriterKind.TASK:
            return self.kind.value
        index = "" if self.map_index in (None, -1) else f"[{self.map_index}]"
        return f"{self.dag_id}/{self.run_id}/{self.task_id}{index} try {self.try_number}"


#: Writes by the REST API and the CLI.
API_WRITER = StateWriter(WriterKind.API)
CLI_WRITER = StateWriter(WriterKind.CLI)


@dataclass(frozen=True)
class VersionedValue:
    """A stored value and its version: 1 when the key was created, one more on every write since."""

    value: str
    version: int


class StateConflictError(Exception):
    """A write with ``if_version`` found another version *stored* (0: absent) than *expected*."""

    def __init__(self, key: str, expected: int, stored: int) -> None:
        self.key = key
        self.expected = expected
        self.stored = stored
        now = "absent" if stored == 0 else f"at version {stored}"
        wanted = "absent (if_version=0)" if expected == 0 else f"at version {expected}"
        super().__init__(
            f"state key {key!r} is {now}, not {wanted}: it was written in between; read it again and retry"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes, like other exceptions
        return (type(self), (self.key, self.expected, self.stored))


class StateCapabilityError(NotImplementedError):
    """A backend was asked for something it does not support (versions, expiry, increments, clean-up)."""

    def __init__(
        self,
        backend: object,
        capability: str,
        advice: str = "use a backend that does (the metastore and Redis backends support every "
        "capability), or leave the option out",
    ) -> None:
        """*backend*: the backend, or the name to give it; *advice*: what to do instead."""
        self.capability = capability
        name = backend if isinstance(backend, str) else type(backend).__name__
        super().__init__(f"{name} does not support {capability}; {advice}")


def validate_writer(writer: object) -> None:
    """Raise ``TypeError`` unless *writer* is a :class:`StateWriter` (which checks itself) or ``None``."""
    if writer is not None and not isinstance(writer, StateWriter):
        raise TypeError(f"writer must be a StateWriter or None, got {type(writer).__name__}: {writer!r:.60}")


def _validate_moment(name: str, moment: object, *, optional: bool) -> None:
    if moment is None and optional:
        return
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a timezone-aware datetime, got {type(moment).__name__}")
    if moment.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (UTC)")


def validate_cleanup(now: object, updated_before: object, batch_size: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless the arguments of ``cleanup()`` make sense."""
    _validate_moment("now", now, optional=False)
    _validate_moment("updated_before", updated_before, optional=True)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


def validate_write_options(expires_at: object, if_version: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless *expires_at* and *if_version* make sense."""
    _validate_moment("expires_at", expires_at, optional=True)
    if if_version is not None:
        if not isinstance(if_version, int) or isinstance(if_version, bool):
            raise TypeError(f"if_version must be an int or None, got {type(if_version).__name__}")
        if not 0 <= if_version <= MAX_COUNTER:
            raise ValueError(f"if_version must be 0 (key absent) or a stored version, got {if_version}")


def validate_write(writer: StateWriter | None, expires_at: object, if_version: object = None) -> int | None:
    """Check a write's writer and options; return the try number task state records (or ``None``)."""
    validate_write_options(expires_at, if_version)
    validate_writer(writer)
    return writer.try_number if writer is not None else None


def validate_increment(by: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless *by* is an integer an increment can add."""
    if not isinstance(by, int) or isinstance(by, bool):
        raise TypeError(f"by must be an int, got {type(by).__name__}: {by!r}")
    if not MIN_COUNTER <= by <= MAX_COUNTER:
        raise ValueError(f"by must be a 64-bit integer ({MIN_COUNTER} to {MAX_COUNTER}), got {by}")


def counter_value(key: str, stored: str | None) -> int:
    """The integer an increment starts from (0: absent); ``ValueError`` unless a 64-bit JSON integer."""
    if stored is None:
        return 0
    text = stored.strip()
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(
            f"state key {key!r} holds {stored[:40]!r}, not an integer: increment works only on keys "
            "that hold a JSON integer (or are absent)"
        )
    number = int(text)
    if not MIN_COUNTER <= number <= MAX_COUNTER:
        raise ValueError(f"state key {key!r} holds {number}, beyond the 64-bit range increments work in")
    return number


def incremented(key: str, stored: str | None, by: int) -> int:
    """*stored* (see :func:`counter_value`) plus *by*, refused when it leaves the 64-bit range."""
    result = counter_value(key, stored) + by
    if not MIN_COUNTER <= result <= MAX_COUNTER:
        raise ValueError(
            f"incrementing state key {key!r} by {by} would leave the 64-bit range ({MIN_COUNTER} to "
            f"{MAX_COUNTER}); nothing was written"
        )
    return result
