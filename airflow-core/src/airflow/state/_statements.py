"""
The SQL behind MetastoreStateBackend, built once per call and run by the sync or async path alike.

Every write is one statement: the upsert finds the dag run (or asset) in a SELECT inside the
INSERT, so there is no extra round trip, no window between lookup and write, and a missing dag
run shows up as "no row written".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Executable, Integer, Select, delete, literal, select
from sqlalchemy.dialects import mysql, postgresql, sqlite

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.state.models import AssetStateModel, TaskStateModel
from airflow.state.models.types import StateKey, StateValue
from airflow.utils.sqlalchemy import UtcDateTime
from airflow_shared.state import AssetScope, StateScope, TaskScope

_task = TaskStateModel.__table__
_asset = AssetStateModel.__table__
_dag_run = DagRun.__table__
_asset_row = AssetModel.__table__

_INSERT_BY_DIALECT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert, "mysql": mysql.insert}
# Dialects whose INSERT ... ON CONFLICT can RETURNING the written row. psycopg 3 reports a
# rowcount of -1 for INSERT ... SELECT ... ON CONFLICT, so rowcount cannot be trusted there.
RETURNING_DIALECTS = frozenset({"postgresql", "sqlite"})


def _task_filter(scope: TaskScope, *, all_map_indices: bool = False) -> list[Any]:
    conditions = [_task.c.dag_id == scope.dag_id, _task.c.run_id == scope.run_id, _task.c.task_id == scope.task_id]
    if not all_map_indices:
        conditions.append(_task.c.map_index == scope.map_index)
    return conditions


def select_value(scope: StateScope, key: str) -> Select[Any]:
    if isinstance(scope, TaskScope):
        return select(_task.c.value).where(*_task_filter(scope), _task.c.key == key)
    return select(_asset.c.value).where(_asset.c.asset_id == scope.asset_id, _asset.c.key == key)


def delete_rows(scope: StateScope, key: str | None = None, *, all_map_indices: bool = False) -> Delete:
    if isinstance(scope, TaskScope):
        stmt = delete(_task).where(*_task_filter(scope, all_map_indices=all_map_indices))
        return stmt.where(_task.c.key == key) if key is not None else stmt
    stmt = delete(_asset).where(_asset.c.asset_id == scope.asset_id)
    return stmt.where(_asset.c.key == key) if key is not None else stmt


def upsert(
    dialect: str, scope: StateScope, key: str, value: str, now: datetime, try_number: int | None = None
) -> Executable:
    """One INSERT ... SELECT ... ON CONFLICT/ON DUPLICATE KEY UPDATE for *scope* and *key*."""
    try:
        insert = _INSERT_BY_DIALECT[dialect]
    except KeyError:
        raise NotImplementedError(
            f"MetastoreStateBackend supports PostgreSQL, MySQL/MariaDB and SQLite, not {dialect!r}"
        ) from None

    if isinstance(scope, AssetScope):
        table, conflict_on = _asset, [_asset.c.asset_id, _asset.c.key]
        source = select(
            _asset_row.c.id,
            literal(key, StateKey()),
            literal(value, StateValue),
            literal(now, UtcDateTime()),
        ).where(_asset_row.c.id == scope.asset_id)
        columns = ["asset_id", "key", "value", "updated_at"]
        updated = ["value", "updated_at"]
    else:
        table, conflict_on = _task, [_task.c.dag_run_id, _task.c.task_id, _task.c.map_index, _task.c.key]
        source = select(
            _dag_run.c.id,
            _dag_run.c.dag_id,
            _dag_run.c.run_id,
            literal(scope.task_id, _task.c.task_id.type),
            literal(scope.map_index, Integer()),
            literal(key, StateKey()),
            literal(value, StateValue),
            literal(now, UtcDateTime()),
            literal(try_number, Integer()),
        ).where(_dag_run.c.dag_id == scope.dag_id, _dag_run.c.run_id == scope.run_id)
        columns = [
            "dag_run_id", "dag_id", "run_id", "task_id", "map_index", "key", "value", "updated_at", "updated_by_try"
        ]
        updated = ["value", "updated_at", "updated_by_try"]

    stmt = insert(table).from_select(columns, source)
    if dialect == "mysql":
        # VALUES(col) rather than a row alias: MariaDB has no row aliases, and MySQL allows
        # neither form's alias on INSERT ... SELECT.
        return stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in updated})
    return stmt.on_conflict_do_update(
        index_elements=conflict_on, set_={c: stmt.excluded[c] for c in updated}
    ).returning(literal(1))
