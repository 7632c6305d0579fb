"""
The SQL behind MetastoreStateBackend: the statements of each scope type, built once at import with
bound parameters only, so that SQLAlchemy (and the autocommit engine) compile each once per dialect.

Every write is one statement: the upsert finds the dag run (or asset) in a SELECT inside the
INSERT, so there is no extra round trip, no window between lookup and write, and a missing dag
run shows up as a rowcount of 0.

This module only builds SQL; :mod:`airflow.state.metastore.operations` says what each call sends
and how to read the answer, and runs it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, assert_never

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.state.metastore.models import AssetStateModel, TaskStateModel
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


class Statements(NamedTuple):
    """The statements of one scope type; their parameters are those of :func:`params`."""

    #: The value of ``:key``.
    select_value: Select[Any]
    #: Every key of the scope.
    select_keys: Select[Any]
    #: Insert or replace ``:key``; also takes ``value``, ``updated_at`` and, for task scopes,
    #: ``updated_by_try``. Its rowcount is 0 when the dag run (or asset) does not exist.
    upsert: Executable
    #: Delete ``:key``.
    delete_key: Delete
    #: Delete every key of the scope (of its own map index, for a task scope).
    clear: Delete
    #: Delete every key of the task in the run, whatever the map index (the same as ``clear``
    #: for asset scopes, which have no map index).
    clear_all_map_indices: Delete


def params(scope: StateScope, key: str | None = None) -> dict[str, Any]:
    """The bound parameters that identify *scope* (and *key*) in every statement of :class:`Statements`."""
    values: dict[str, Any]
    match scope:
        case TaskScope():
            values = {
                "dag_id": scope.dag_id,
                "run_id": scope.run_id,
                "task_id": scope.task_id,
                "map_index": scope.map_index,
            }
        case AssetScope():
            values = {"asset_id": scope.asset_id}
        case _:
            assert_never(scope)
    if key is not None:
        values["key"] = key
    return values


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


def _written_by_upsert(table: Any) -> list[Any]:
    """Bound parameters for the written columns, typed as the columns (keys as bytes on MySQL)."""
    return [
        bindparam("key", type_=table.c.key.type),
        bindparam("value", type_=table.c.value.type),
        bindparam("updated_at", type_=table.c.updated_at.type),
    ]


def _task_statements() -> Statements:
    same_task = (
        _task.c.dag_id == bindparam("dag_id"),
        _task.c.run_id == bindparam("run_id"),
        _task.c.task_id == bindparam("task_id"),
    )
    same_map_index = _task.c.map_index == bindparam("map_index")
    same_key = _task.c.key == bindparam("key")
    columns = ["dag_run_id", "dag_id", "run_id", "task_id", "map_index", "key", "value", "updated_at"]
    source = select(
        _dag_run.c.id,
        _dag_run.c.dag_id,
        _dag_run.c.run_id,
        bindparam("task_id", type_=_task.c.task_id.type),
        bindparam("map_index", type_=Integer()),
        *_written_by_upsert(_task),
        bindparam("updated_by_try", type_=Integer()),
    ).where(_dag_run.c.dag_id == bindparam("dag_id"), _dag_run.c.run_id == bindparam("run_id"))
    upsert = (
        _Upsert(_task)
        .from_select([*columns, "updated_by_try"], source)
        .on_conflict_update(
            ["dag_run_id", "task_id", "map_index", "key"], ["value", "updated_at", "updated_by_try"]
        )
    )
    return Statements(
        select_value=select(_task.c.value).where(*same_task, same_map_index, same_key),
        select_keys=select(_task.c.key).where(*same_task, same_map_index),
        upsert=upsert,
        delete_key=delete(_task).where(*same_task, same_map_index, same_key),
        clear=delete(_task).where(*same_task, same_map_index),
        clear_all_map_indices=delete(_task).where(*same_task),
    )


def _asset_statements() -> Statements:
    same_asset = _asset.c.asset_id == bindparam("asset_id")
    same_key = _asset.c.key == bindparam("key")
    source = select(_asset_row.c.id, *_written_by_upsert(_asset)).where(
        _asset_row.c.id == bindparam("asset_id")
    )
    upsert = (
        _Upsert(_asset)
        .from_select(["asset_id", "key", "value", "updated_at"], source)
        .on_conflict_update(["asset_id", "key"], ["value", "updated_at"])
    )
    clear = delete(_asset).where(same_asset)
    return Statements(
        select_value=select(_asset.c.value).where(same_asset, same_key),
        select_keys=select(_asset.c.key).where(same_asset),
        upsert=upsert,
        delete_key=delete(_asset).where(same_asset, same_key),
        clear=clear,
        clear_all_map_indices=clear,
    )


TASK_STATE = _task_statements()
ASSET_STATE = _asset_statements()


def for_scope(scope: StateScope) -> Statements:
    """The statements that read and write the state of *scope*'s type."""
    match scope:
        case TaskScope():
            return TASK_STATE
        case AssetScope():
            return ASSET_STATE
        case _:
            assert_never(scope)
