"""
What operators read from the metastore: a scope's entries a page at a time, and key counts.

These are not on a task's hot path, so they run as ordinary SQLAlchemy Core queries on a session
(the caller's, or one of their own) rather than through :mod:`~airflow.state.metastore.operations`.
Keys are sorted and filtered by prefix in Python: database collations order text differently
(and MySQL compares keys as bytes), and a prefix must match as text, never as a LIKE pattern.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from airflow._shared.timezones import timezone
from airflow.state.metastore import statements
from airflow.utils.session import create_session
from airflow_shared.state import (
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    validate_listing,
    validate_scope,
)
from airflow_shared.state.entries import page_of_keys
from sqlalchemy import func, select

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# Bound parameters per IN list: well under every dialect's limit (SQLite's is 32766).
_CHUNK = 500


def _session(session: Session | None) -> AbstractContextManager[Session]:
    return create_session() if session is None else nullcontext(session)


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def stored_writer(kind: str | None, *task_instance: Any) -> StateWriter | None:
    """
    The last writer of an asset_state row from its ``updated_by*`` columns (in the order of
    :data:`~.statements.ASSET_WRITER_COLUMNS`); ``None`` when not recorded.
    """
    if kind is None:
        return None
    try:
        return StateWriter(kind, *task_instance)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # stored before StateWriter checked its fields: not known
        return None


def entry(scope: StateScope, row: Sequence[Any]) -> StateEntry:
    """The entry of a row of :func:`~.statements.select_entries`."""
    key, value, updated_at, version, expires_at, *writer = row
    if isinstance(scope, TaskScope):  # the try that wrote it; asset state's writer carries it
        return StateEntry(key, value, updated_at, writer[0], version, expires_at)
    return StateEntry(key, value, updated_at, None, version, expires_at, stored_writer(*writer))


def entries(
    scope: StateScope, key_prefix: str | None, offset: int, limit: int | None, session: Session | None
) -> StateEntryPage:
    validate_scope(scope)
    validate_listing(key_prefix, offset, limit)
    values = {**statements.params(scope), "now": timezone.utcnow()}
    sql = statements.for_scope(scope)
    with _session(session) as db:
        keys = list(db.scalars(sql.select_keys, values))
        page, total = page_of_keys(keys, key_prefix, offset, limit)
        if not page:
            return StateEntryPage([], total)
        if len(page) == len(keys):  # the whole scope: no IN list needed
            rows = list(db.execute(sql.select_entries, values))
        else:
            key_column = sql.select_entries.selected_columns[0]
            rows = [
                row
                for chunk in _chunks(page)
                for row in db.execute(sql.select_entries.where(key_column.in_(chunk)), values)
            ]
    found = {row[0]: row for row in rows}
    # A key missing from the rows was deleted between the two reads.
    return StateEntryPage([entry(scope, found[key]) for key in page if key in found], total)


def key_counts(scopes: Sequence[StateScope], session: Session | None) -> list[int]:
    counts: dict[tuple[Any, ...], int] = {}
    tasks_by_run: dict[tuple[str, str], set[str]] = defaultdict(set)
    asset_ids: set[int] = set()
    for scope in scopes:
        validate_scope(scope)
        if isinstance(scope, TaskScope):
            tasks_by_run[(scope.dag_id, scope.run_id)].add(scope.task_id)
        else:
            asset_ids.add(scope.asset_id)
    task, asset = statements.CLEANED_TABLES
    values = {"now": timezone.utcnow()}
    with _session(session) as db:
        for (dag_id, run_id), task_ids in tasks_by_run.items():
            for chunk in _chunks(sorted(task_ids)):
                query = (
                    select(task.c.task_id, task.c.map_index, func.count())
                    .where(
                        task.c.dag_id == dag_id,
                        task.c.run_id == run_id,
                        task.c.task_id.in_(chunk),
                        statements.live(task),
                    )
                    .group_by(task.c.task_id, task.c.map_index)
                )
                for task_id, map_index, count in db.execute(query, values):
                    counts[("task", dag_id, run_id, task_id, map_index)] = count
        for chunk in _chunks(sorted(asset_ids)):
            query = (
                select(asset.c.asset_id, func.count())
                .where(asset.c.asset_id.in_(chunk), statements.live(asset))
                .group_by(asset.c.asset_id)
            )
            for asset_id, count in db.execute(query, values):
                counts[("asset", asset_id)] = count
    return [counts.get(_count_key(scope), 0) for scope in scopes]


def _count_key(scope: StateScope) -> tuple[Any, ...]:
    if isinstance(scope, TaskScope):
        return ("task", scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
    return ("asset", scope.asset_id)
