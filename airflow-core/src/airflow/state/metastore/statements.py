"""
The SQL behind MetastoreStateBackend: each statement is built once, with bound parameters, and
reused by the sync and async paths alike (SQLAlchemy then compiles it once per dialect).

Every write is one statement: the upsert finds the dag run (or asset) in a SELECT inside the
INSERT, so there is no extra round trip, no window between lookup and write, and a missing dag
run shows up as a rowcount of 0.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.state.metastore.models import AssetStateModel, TaskStateModel
from airflow.state.metastore.models.types import StateKey, StateValue
from airflow.utils.sqlalchemy import UtcDateTime
from airflow_shared.state import AssetScope, StateScope, TaskScope
from sqlalchemy import Delete, Executable, Integer, Select, bindparam, delete, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.visitors import InternalTraversal

_task = TaskStateModel.__table__
_asset = AssetStateModel.__table__
_dag_run = DagRun.__table__
_asset_row = AssetModel.__table__


def params(scope: StateScope, key: str | None = None) -> dict[str, Any]:
    """The bound parameters that identify *scope* (and *key*) in every statement below."""
    values: dict[str, Any] = (
        {
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "task_id": scope.task_id,
            "map_index": scope.map_index,
        }
        if isinstance(scope, TaskScope)
        else {"asset_id": scope.asset_id}
    )
    if key is not None:
        values["key"] = key
    return values


def _task_instance(*, all_map_indices: bool = False) -> list[Any]:
    conditions = [
        _task.c.dag_id == bindparam("dag_id"),
        _task.c.run_id == bindparam("run_id"),
        _task.c.task_id == bindparam("task_id"),
    ]
    if not all_map_indices:
        conditions.append(_task.c.map_index == bindparam("map_index"))
    return conditions


@cache
def select_value(scope_type: type[StateScope]) -> Select[Any]:
    if scope_type is TaskScope:
        return select(_task.c.value).where(*_task_instance(), _task.c.key == bindparam("key"))
    return select(_asset.c.value).where(
        _asset.c.asset_id == bindparam("asset_id"), _asset.c.key == bindparam("key")
    )


@cache
def select_keys(scope_type: type[StateScope]) -> Select[Any]:
    if scope_type is TaskScope:
        return select(_task.c.key).where(*_task_instance())
    return select(_asset.c.key).where(_asset.c.asset_id == bindparam("asset_id"))


@cache
def delete_rows(scope_type: type[StateScope], *, one_key: bool, all_map_indices: bool = False) -> Delete:
    if scope_type is TaskScope:
        stmt = delete(_task).where(*_task_instance(all_map_indices=all_map_indices))
        return stmt.where(_task.c.key == bindparam("key")) if one_key else stmt
    stmt = delete(_asset).where(_asset.c.asset_id == bindparam("asset_id"))
    return stmt.where(_asset.c.key == bindparam("key")) if one_key else stmt


class _OnConflictUpdate(ClauseElement):
    """
    ``ON CONFLICT (...) DO UPDATE`` / ``ON DUPLICATE KEY UPDATE``, as a construct SQLAlchemy can cache.

    SQLAlchemy 2.0's dialect-specific ``insert()`` constructs opt out of the compiled cache, so a
    statement built with them is compiled again on every execution: about a millisecond per
    ``set``, more than the round trip itself. This clause renders the same SQL on a plain,
    cacheable INSERT.
    """

    __visit_name__ = "state_on_conflict_update"
    _traverse_internals = [
        ("conflict_columns", InternalTraversal.dp_string_list),
        ("update_columns", InternalTraversal.dp_string_list),
    ]

    def __init__(self, conflict_columns: list[str], update_columns: list[str]) -> None:
        self.conflict_columns = conflict_columns
        self.update_columns = update_columns


class _Upsert(Insert):
    inherit_cache = True

    def on_conflict_update(self, conflict_columns: list[str], update_columns: list[str]) -> _Upsert:
        upsert = self._generate()
        upsert._post_values_clause = _OnConflictUpdate(conflict_columns, update_columns)
        return upsert


@compiles(_OnConflictUpdate)
def _unsupported(clause: _OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    raise NotImplementedError(
        f"MetastoreStateBackend supports PostgreSQL, MySQL/MariaDB and SQLite, not {compiler.dialect.name!r}"
    )


@compiles(_OnConflictUpdate, "postgresql")
@compiles(_OnConflictUpdate, "sqlite")
def _on_conflict_do_update(clause: _OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    quote = compiler.preparer.quote
    conflict = ", ".join(quote(c) for c in clause.conflict_columns)
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in clause.update_columns)
    return f"ON CONFLICT ({conflict}) DO UPDATE SET {updates}"


@compiles(_OnConflictUpdate, "mysql")
def _on_duplicate_key_update(clause: _OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    # VALUES(col) rather than a row alias: MariaDB has no row aliases, and MySQL allows no
    # alias on INSERT ... SELECT. SQLAlchemy's MySQL drivers connect with CLIENT_FOUND_ROWS, so
    # an update counts in the rowcount even when it changes nothing.
    quote = compiler.preparer.quote
    return "ON DUPLICATE KEY UPDATE " + ", ".join(
        f"{quote(c)} = VALUES({quote(c)})" for c in clause.update_columns
    )


@cache
def upsert(scope_type: type[StateScope]) -> Executable:
    """
    INSERT ... SELECT ... ON CONFLICT (ON DUPLICATE KEY on MySQL) for one key; its rowcount is 0
    when the dag run (or asset) does not exist.

    Parameters: those of :func:`params` plus ``value``, ``updated_at`` and, for task scopes,
    ``updated_by_try``.
    """
    key = bindparam("key", type_=StateKey())
    value = bindparam("value", type_=StateValue)
    updated_at = bindparam("updated_at", type_=UtcDateTime())
    if scope_type is AssetScope:
        table, conflict_on = _asset, ["asset_id", "key"]
        source = select(_asset_row.c.id, key, value, updated_at).where(
            _asset_row.c.id == bindparam("asset_id")
        )
        columns = ["asset_id", "key", "value", "updated_at"]
        updated = ["value", "updated_at"]
    else:
        table, conflict_on = _task, ["dag_run_id", "task_id", "map_index", "key"]
        source = select(
            _dag_run.c.id,
            _dag_run.c.dag_id,
            _dag_run.c.run_id,
            bindparam("task_id", type_=_task.c.task_id.type),
            bindparam("map_index", type_=Integer()),
            key,
            value,
            updated_at,
            bindparam("updated_by_try", type_=Integer()),
        ).where(_dag_run.c.dag_id == bindparam("dag_id"), _dag_run.c.run_id == bindparam("run_id"))
        columns = [
            "dag_run_id",
            "dag_id",
            "run_id",
            "task_id",
            "map_index",
            "key",
            "value",
            "updated_at",
            "updated_by_try",
        ]
        updated = ["value", "updated_at", "updated_by_try"]

    return _Upsert(table).from_select(columns, source).on_conflict_update(conflict_on, updated)
