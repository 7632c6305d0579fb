"""The two namespaces state lives in: one task instance, or one asset."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Union


@dataclass(frozen=True)
class TaskScope:
    """
    The state of one task instance: shared by all its tries, separate per map index (-1: not mapped).

    *dag_run_uid* names this incarnation of the dag run (a run created again with the same
    ``run_id`` has another); a backend other than the metastore MUST key task state on it and
    refuse a scope without it (see docs/writing-a-backend.md).
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    dag_run_uid: str | None = None

    def __post_init__(self) -> None:
        for field in ("dag_id", "run_id", "task_id"):
            if not isinstance(text := getattr(self, field), str) or not text:
                raise ValueError(f"TaskScope.{field} must be a non-empty string, got {text!r}")
        # bool is an int subclass; True as a map index is always a mistake.
        if not isinstance(self.map_index, int) or isinstance(self.map_index, bool):
            raise TypeError(f"TaskScope.map_index must be an int, got {self.map_index!r}")
        if self.map_index < -1:
            raise ValueError(
                f"TaskScope.map_index must be -1 (not mapped) or a mapped index >= 0, got {self.map_index}"
            )
        if self.dag_run_uid is not None:
            if not isinstance(self.dag_run_uid, str):
                raise TypeError(
                    f"TaskScope.dag_run_uid must be a str or None, got {type(self.dag_run_uid).__name__}: "
                    f"{self.dag_run_uid!r}"
                )
            if not self.dag_run_uid:
                raise ValueError("TaskScope.dag_run_uid must be a non-empty string or None, got ''")


@dataclass(frozen=True)
class AssetScope:
    """The state of one asset (its id in the metadata database), shared by every run."""

    asset_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.asset_id, int) or isinstance(self.asset_id, bool):
            raise TypeError(f"AssetScope.asset_id must be an int, got {self.asset_id!r}")


# Union[] rather than `|` so the alias also evaluates at runtime on Python 3.10 for isinstance().
StateScope = Union[TaskScope, AssetScope]  # noqa: UP007


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def dag_run_uid(dag_run_id: int, created_at: datetime | None, run_after: datetime) -> str:
    """
    The ``TaskScope.dag_run_uid`` of a dag run row: ``f"{dag_run_id}.{micros}"``, *micros* being
    ``created_at`` (``run_after`` where migrated rows left it NULL) in microseconds since the epoch.
    A row deleted and inserted again gives another string, even when the database reuses its id
    (SQLite does). It lives here because every process addressing a backend keyed on it (3.2's
    servers, a backend adapted to 3.3) must compute the same string.
    """
    if isinstance(dag_run_id, bool) or not isinstance(dag_run_id, int):
        raise TypeError(f"dag_run_id must be an int, got {type(dag_run_id).__name__}: {dag_run_id!r}")
    instant = created_at if created_at is not None else run_after
    if not isinstance(instant, datetime):
        raise TypeError(
            f"created_at or run_after must be a datetime, got {type(instant).__name__}: {instant!r}"
        )
    # Naive values are UTC: Airflow stores UTC, and SQLite hands some of them back without a zone.
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    # Integer arithmetic on the timedelta: a float timestamp would round away microseconds.
    return f"{dag_run_id}.{(instant - _EPOCH) // _MICROSECOND}"
