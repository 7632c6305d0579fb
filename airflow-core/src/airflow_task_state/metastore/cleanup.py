"""
Removing expired (and, on request, old) keys from the metastore, a batch at a time. Each batch is
one DELETE of at most *batch_size* rows, found through the ``expires_at`` index and deleted in the
same statement, committed on its own: no statement holds locks on more than one batch, and a key
rewritten meanwhile (with a new expiry) is never removed. (A SELECT of primary keys followed by
``DELETE ... WHERE (pk) IN (...)`` was 30x slower on PostgreSQL: it plans a scan per batch.)
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from airflow.utils.session import create_session
from airflow_shared.state import COMMIT_RECORDS_TASK_ID, validate_cleanup
from sqlalchemy import bindparam, text

from airflow_task_state.metastore.statements import CLEANED_TABLES

if TYPE_CHECKING:
    from sqlalchemy import CursorResult


def _statement(table: Any, dialect: Any, by_age: bool, dry_run: bool) -> Any:
    """
    One batch's DELETE (or, for a dry run, the COUNT of every removable row) for *dialect*;
    parameters ``now``, ``batch_size`` and ``updated_before``.
    """
    name = dialect.identifier_preparer.format_table(table)
    condition = "(expires_at IS NOT NULL AND expires_at <= :now)"
    if by_age:
        old = "updated_at < :updated_before"
        if "task_id" in table.c:  # commit records go only as they expire: exactly-once rests on them
            old = f"({old} AND task_id <> '{COMMIT_RECORDS_TASK_ID}')"
        condition = f"({condition} OR {old})"
    match dialect.name:
        case _ if dry_run:
            sql = f"SELECT COUNT(*) FROM {name} WHERE {condition}"
        case "postgresql":
            sql = (
                f"DELETE FROM {name} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {name} WHERE {condition} "
                "LIMIT :batch_size))"
            )
        case "mysql":
            sql = f"DELETE FROM {name} WHERE {condition} LIMIT :batch_size"
        case "sqlite":
            sql = (
                f"DELETE FROM {name} WHERE rowid IN (SELECT rowid FROM {name} WHERE {condition} "
                "LIMIT :batch_size)"
            )
        case other:
            raise NotImplementedError(f"MetastoreStateBackend cannot clean up on {other!r}")
    binds = [bindparam("now", type_=table.c.expires_at.type)]
    if by_age:
        binds.append(bindparam("updated_before", type_=table.c.updated_at.type))
    return text(sql).bindparams(*binds)


def cleanup(
    *,
    now: datetime,
    updated_before: datetime | None = None,
    batch_size: int = 1000,
    dry_run: bool = False,
    session: Any = None,
) -> int:
    """
    Remove (or with *dry_run* count) the removable keys of both tables; return how many. Each
    batch commits on a session of its own, whatever *session* is given.
    """
    validate_cleanup(now, updated_before, batch_size)
    total = 0
    values = {"now": now, "updated_before": updated_before, "batch_size": batch_size}
    if updated_before is None:
        del values["updated_before"]
    for table in CLEANED_TABLES:
        while True:
            with create_session() as session:
                dialect = session.get_bind().dialect
                statement = _statement(table, dialect, updated_before is not None, dry_run)
                result = session.execute(statement, values)
                if dry_run:
                    total += result.scalar() or 0
                    break
                # A DELETE's result is a CursorResult, which has the rowcount.
                deleted = cast("CursorResult[Any]", result).rowcount
            total += deleted
            if deleted < batch_size:
                break
    return total
