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
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, assert_never

from airflow._shared.timezones import timezone
from airflow.state.metastore.models import AssetStateModel, TaskStateModel
from airflow.state.metastore.statements import ASSET_WRITER_COLUMNS
from airflow_shared.state import (
    AssetScope,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    validate_listing,
    validate_scope,
)
from airflow_shared.state.entries import page_of_keys
from sqlalchemy import func, or_, select

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_task = TaskStateModel.__table__
_asset = AssetStateModel.__table__
# Bound parameters per IN list: well under every dialect's limit (SQLite's is 32766).
_CHUNK = 500


@contextmanager
def _session(session: Session | None) -> Iterator[Session]:
    if session is not None:
        yield session
        return
    from airflow.utils.session import create_session

    with create_session() as own:
        yield own


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _live(table: Any, now: datetime) -> Any:
    """Expired keys are never listed, even before clean-up removes them."""
    return or_(table.c.expires_at.is_(None), table.c.expires_at > now)


_COMMON = ("key", "value", "updated_at", "version", "expires_at")


def _columns_and_filter(scope: StateScope, now: datetime) -> tuple[Any, list[Any], list[Any]]:
    match scope:
        case TaskScope():
            where = [
                _task.c.dag_id == scope.dag_id,
                _task.c.run_id == scope.run_id,
                _task.c.task_id == scope.task_id,
                _task.c.map_index == scope.map_index,
                _live(_task, now),
            ]
            columns = [*(_task.c[name] for name in _COMMON), _task.c.updated_by_try]
            return _task, columns, where
        case AssetScope():
            columns = [
                *(_asset.c[name] for name in _COMMON),
                *(_asset.c[name] for name in ASSET_WRITER_COLUMNS),
            ]
            return _asset, columns, [_asset.c.asset_id == scope.asset_id, _live(_asset, now)]
        case _:
            assert_never(scope)


def stored_writer(kind: str | None, *task_instance: Any) -> StateWriter | None:
    """
    The last writer of an asset_state row from its ``updated_by*`` columns (in the order of
    :data:`ASSET_WRITER_COLUMNS`); ``None`` when not recorded.
    """
    if kind is None:
        return None
    try:
        return StateWriter(kind, *task_instance)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # stored before StateWriter checked its fields: not known
        return None


def _writer(row: Any) -> StateWriter | None:
    """The last writer of an asset_state row (``None`` for task state, and when not recorded)."""
    if "updated_by" not in row._fields:
        return None
    return stored_writer(*(getattr(row, name) for name in ASSET_WRITER_COLUMNS))


def _entry(key: str, row: Any) -> StateEntry:
    writer = _writer(row)
    return StateEntry(
        key,
        row.value,
        row.updated_at,
        # Asset state has no try of its own: the writer carries it.
        row.updated_by_try if "updated_by" not in row._fields else None,
        row.version,
        row.expires_at,
        writer,
    )


def entries(
    scope: StateScope, key_prefix: str | None, offset: int, limit: int | None, session: Session | None
) -> StateEntryPage:
    validate_scope(scope)
    validate_listing(key_prefix, offset, limit)
    table, columns, where = _columns_and_filter(scope, timezone.utcnow())
    with _session(session) as db:
        keys = list(db.scalars(select(table.c.key).where(*where)))
        page, total = page_of_keys(keys, key_prefix, offset, limit)
        if not page:
            return StateEntryPage([], total)
        if len(page) == len(keys):  # the whole scope: no IN list needed
            rows = list(db.execute(select(*columns).where(*where)))
        else:
            rows = [
                row
                for chunk in _chunks(page)
                for row in db.execute(select(*columns).where(*where, table.c.key.in_(chunk)))
            ]
    found = {row.key: row for row in rows}
    return StateEntryPage(
        [_entry(key, found[key]) for key in page if key in found],  # else deleted between the two reads
        total,
    )


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
    now = timezone.utcnow()
    with _session(session) as db:
        for (dag_id, run_id), task_ids in tasks_by_run.items():
            for chunk in _chunks(sorted(task_ids)):
                query = (
                    select(_task.c.task_id, _task.c.map_index, func.count())
                    .where(
                        _task.c.dag_id == dag_id,
                        _task.c.run_id == run_id,
                        _task.c.task_id.in_(chunk),
                        _live(_task, now),
                    )
                    .group_by(_task.c.task_id, _task.c.map_index)
                )
                for task_id, map_index, count in db.execute(query):
                    counts[("task", dag_id, run_id, task_id, map_index)] = count
        for chunk in _chunks(sorted(asset_ids)):
            query = (
                select(_asset.c.asset_id, func.count())
                .where(_asset.c.asset_id.in_(chunk), _live(_asset, now))
                .group_by(_asset.c.asset_id)
            )
            for asset_id, count in db.execute(query):
                counts[("asset", asset_id)] = count
    return [counts.get(_count_key(scope), 0) for scope in scopes]


def _count_key(scope: StateScope) -> tuple[Any, ...]:
    if isinstance(scope, TaskScope):
        return ("task", scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
    return ("asset", scope.asset_id)
