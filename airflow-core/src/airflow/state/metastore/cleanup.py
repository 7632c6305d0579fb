"""
Removing expired (and, on request, old) keys from the metastore, a batch at a time.

Each batch is its own short transaction: select at most *batch_size* primary keys of removable rows
(through the ``expires_at`` index), then delete exactly those rows, checking again that they are
still removable, so a key rewritten in between (with a new expiry) stays. No statement ever holds
locks on more than one batch, and reads and writes of other keys carry on meanwhile.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.state.metastore.statements import CLEANED_TABLES, removable
from sqlalchemy import delete, func, select, tuple_

# Primary keys per DELETE: four bound parameters each for task_state, well under SQLite's limit.
_DELETE_CHUNK = 500


def _validate(now: object, updated_before: object, batch_size: object) -> None:
    for name, when in (("now", now), ("updated_before", updated_before)):
        if when is None and name == "updated_before":
            continue
        if not isinstance(when, datetime):
            raise TypeError(f"{name} must be a datetime, got {type(when).__name__}")
        if when.tzinfo is None:
            raise ValueError(f"{name} must be timezone-aware (UTC)")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def cleanup(*, now: datetime, updated_before: datetime | None, batch_size: int, dry_run: bool) -> int:
    """Remove (or with *dry_run* count) the removable keys of both tables; return how many."""
    from airflow.utils.session import create_session

    _validate(now, updated_before, batch_size)
    total = 0
    for table, primary_key in CLEANED_TABLES:
        condition = removable(table, now, updated_before)
        if dry_run:
            with create_session() as session:
                total += session.scalar(select(func.count()).select_from(table).where(condition)) or 0
            continue
        while True:
            with create_session() as session:
                batch = [
                    tuple(row)
                    for row in session.execute(select(*primary_key).where(condition).limit(batch_size))
                ]
                total += _delete(session, table, primary_key, batch, condition)
            if len(batch) < batch_size:
                break
    return total


def _delete(
    session: Any, table: Any, primary_key: list[Any], batch: list[tuple[Any, ...]], condition: Any
) -> int:
    deleted = 0
    for start in range(0, len(batch), _DELETE_CHUNK):
        chunk = batch[start : start + _DELETE_CHUNK]
        statement = delete(table).where(tuple_(*primary_key).in_(chunk), condition)
        deleted += session.execute(statement).rowcount
    return deleted
