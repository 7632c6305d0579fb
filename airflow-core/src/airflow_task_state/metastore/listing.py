"""
What operators read from the metastore (a scope's entries a page at a time, key counts): not on a
task's hot path, so ordinary SQLAlchemy Core queries on a session. Keys are sorted and filtered by
prefix in Python: database collations order text differently (and MySQL compares keys as bytes),
and a prefix must match as text, never as a LIKE pattern.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from airflow._shared.timezones import timezone
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

from airflow_task_state.metastore import statements

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
    scope: StateScope,
    *,
    key_prefix: str | None = None,
    offset: int = 0,
    limit: int | None = None,
    session: Session | None = None,
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


def key_counts(scopes: Sequence[StateScope], *, session: Session | None = None) -> list[int]:
    # One query per chunk of a run's task ids, counted per task and map index; or of asset ids.
    wanted: dict[tuple[str, ...], set[Any]] = defaultdict(set)
    for scope in scopes:
        validate_scope(scope)
        if isinstance(scope, TaskScope):
            wanted[(scope.dag_id, scope.run_id)].add(scope.task_id)
        else:
            wanted[()].add(scope.asset_id)
    task, asset = statements.CLEANED_TABLES
    counts: dict[tuple[Any, ...], int] = {}
    now = {"now": timezone.utcnow()}
    with _session(session) as db:
        for run, ids in wanted.items():
            if run:
                table, counted = task, [task.c.task_id, task.c.map_index]
                where = [task.c.dag_id == run[0], task.c.run_id == run[1]]
            else:
                table, counted, where = asset, [asset.c.asset_id], []
            for chunk in _chunks(sorted(ids)):
                in_chunk = [*where, counted[0].in_(chunk), statements.live(table)]
                query = select(*counted, func.count()).where(*in_chunk).group_by(*counted)
                for *counted_ids, count in db.execute(query, now):
                    counts[(*run, *counted_ids)] = count
    return [counts.get(_count_key(scope), 0) for scope in scopes]


def _count_key(scope: StateScope) -> tuple[Any, ...]:
    if isinstance(scope, TaskScope):
        return (scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
    return (scope.asset_id,)
