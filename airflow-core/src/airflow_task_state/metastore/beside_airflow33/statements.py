"""
The SQL of the metastore on Airflow 3.3 (:mod:`.backend` says what each call sends), built once per
scope type and number of keys with bound parameters only, as :mod:`..statements` builds 3.2's, so
that the autocommit engine compiles each once per dialect. Every statement binds the scope's fields
by their names (:func:`..statements.params`) and its keys as ``key_0`` ... ``key_<n-1>``; a write
binds ``value_<i>`` and ``version_<i>`` for each key too. No write returns rows (MySQL 8 has no
RETURNING) but :func:`write_at_once`, which only PostgreSQL runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from airflow.models.asset import AssetModel
from airflow.models.asset_state_store import AssetStateStoreModel
from airflow.models.dagrun import DagRun
from airflow.models.task_state_store import TaskStateStoreModel
from sqlalchemy import (
    Delete,
    Insert,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
    update,
)

from airflow_task_state.metastore.beside_airflow33.models import AssetStateMetaModel, TaskStateMetaModel
from airflow_task_state.metastore.statements import TRY_RUNS, OnConflictUpdate, Proposed, batch_rows

_dag_run = DagRun.__table__


def _literal(number: int) -> Any:
    # Not a bound parameter: the autocommit engine binds only the parameters it is given.
    return literal_column(str(number), Integer())


def _bind(table: Any, name: str, n: int | None = None) -> Any:
    """A parameter typed as *table*'s column *name*; ``<name>_<n>`` for the *n*-th key's."""
    return bindparam(name if n is None else f"{name}_{n}", type_=table.c[name].type)


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, a key of the caches below
class Tables:
    """A scope type's rows (Airflow's) and meta rows (ours), and how its statements find them."""

    rows: Any  # Table: SQLAlchemy types a model's __table__ as any FromClause
    meta: Any
    #: The columns both tables name a scope by, the parent's id first.
    scope_columns: tuple[str, ...]
    #: The row the state hangs on (the dag run, the asset), how a scope's parameters find it, and
    #: its id as statements find it (a dag run's by its dag and run ids).
    parent: Any
    parent_filter: tuple[Any, ...]
    parent_id: Any
    #: What each table's row holds besides scope, key and value (version), in the order written.
    row_columns: tuple[str, ...]
    meta_columns: tuple[str, ...]

    @property
    def same_key(self) -> Any:
        return and_(*(self.meta.c[name] == self.rows.c[name] for name in (*self.scope_columns, "key")))

    @property
    def joined(self) -> Any:
        return self.rows.outerjoin(self.meta, self.same_key)

    @property
    def current(self) -> Any:
        """The meta row describes the row's value (no meta row: NULL, so not)."""
        return self.meta.c.updated_at == self.rows.c.updated_at

    @property
    def version(self) -> Any:
        stored = func.coalesce(self.meta.c.version, _literal(0)) + _literal(1)
        return case((self.current, self.meta.c.version), else_=stored)

    @property
    def version_looked_up(self) -> Any:
        """
        :attr:`version` from a subquery of the other table, for a statement on one of them (NULL
        where that row is missing): PostgreSQL plans it in less time than the join.
        """
        after = case((self.current, self.meta.c.version), else_=self.meta.c.version + _literal(1))
        return select(after).where(self.same_key).scalar_subquery()

    @property
    def expires_at(self) -> Any:
        if "expires_at" in self.rows.c:
            return self.rows.c.expires_at
        return case((self.current, self.meta.c.expires_at))

    def of_scope(self, table: Any = None, all_map_indices: bool = False) -> list[Any]:
        """The scope's rows (every map index of a task) in *table* (Airflow's by default), by key prefix."""
        table = self.rows if table is None else table
        parent, *others = (
            name for name in self.scope_columns if not (all_map_indices and name == "map_index")
        )
        return [table.c[parent] == self.parent_id, *(table.c[name] == _bind(table, name) for name in others)]


_asset = AssetModel.__table__
_run_filter = (_dag_run.c.dag_id == bindparam("dag_id"), _dag_run.c.run_id == bindparam("run_id"))
TASK = Tables(
    TaskStateStoreModel.__table__,
    TaskStateMetaModel.__table__,
    ("dag_run_id", "task_id", "map_index"),
    _dag_run,
    _run_filter,
    select(_dag_run.c.id).where(*_run_filter).scalar_subquery(),
    ("dag_id", "run_id", "updated_at", "expires_at"),
    ("updated_by_try", "updated_at"),
)
ASSET = Tables(
    AssetStateStoreModel.__table__,
    AssetStateMetaModel.__table__,
    ("asset_id",),
    _asset,
    (_asset.c.id == bindparam("asset_id"),),
    bindparam("asset_id"),
    (
        "updated_at",
        *(f"last_updated_by_{name}" for name in ("kind", "dag_id", "run_id", "task_id", "map_index")),
    ),
    ("updated_by_try", "updated_at", "expires_at", "updated_by"),
)


def live(tables: Tables) -> Any:
    """Expired keys are invisible to every read (``now`` bound)."""
    now = bindparam("now", type_=tables.rows.c.updated_at.type)
    return or_(tables.expires_at.is_(None), tables.expires_at > now)


def _keys(column: Any, size: int) -> Any:
    return column.in_([_bind(column.table, "key", n) for n in range(size)])


@cache
def select_entries(tables: Tables, size: int) -> Select[Any]:
    """What an entry shows of each live key named (every live key of the scope for *size* 0)."""
    rows, meta = tables.rows.c, tables.meta.c
    columns = [rows.key, rows.value, rows.updated_at, tables.version.label("version")]
    columns += [tables.expires_at.label("expires_at")]
    tried = case((tables.current, meta.updated_by_try)).label("updated_by_try")
    if tables is ASSET:
        kind_column = case((tables.current, meta.updated_by), else_=rows.last_updated_by_kind).label(
            "updated_by"
        )
        task_instance = [
            rows[f"last_updated_by_{name}"] for name in ("dag_id", "run_id", "task_id", "map_index")
        ]
        columns += [kind_column, *task_instance]
    query = select(*columns, tried).select_from(tables.joined).where(*tables.of_scope(), live(tables))
    return query.where(_keys(rows.key, size)) if size else query


@cache
def select_value(tables: Tables, versioned: bool = False) -> Select[Any]:
    """The value of ``:key_0`` if live (and, *versioned*, its version)."""
    rows = tables.rows.c
    if "expires_at" not in rows:  # an asset's expiry is in its meta row: the entry's join
        version, query = tables.version, select(rows.value).select_from(tables.joined)
    else:
        version, query = func.coalesce(tables.version_looked_up, _literal(1)), select(rows.value)
    query = query.add_columns(version) if versioned else query
    return query.where(*tables.of_scope(), _keys(rows.key, 1), live(tables))


@cache
def lock(tables: Tables, size: int, while_running: bool = False) -> Insert:
    """
    Create the meta rows of the keys (version 0, no time) where the parent exists; lock them all.
    *while_running*: only while the try ``:running_try`` of task instance ``:running_ti_id`` runs.
    """
    scope = (_bind(tables.meta, name) for name in tables.scope_columns[1:])
    if size == 1:  # no subquery of keys to join: less for PostgreSQL to plan, every time
        source = select(tables.parent.c.id, *scope, _bind(tables.meta, "key", 0), _literal(0))
    else:
        keys = batch_rows(tables.meta, size, ("key",))
        source = select(tables.parent.c.id, *scope, keys.c.key, _literal(0))
        source = source.select_from(tables.parent.join(keys, true()))
    source = source.where(*tables.parent_filter)
    if while_running:
        source = source.where(TRY_RUNS)
    statement = insert(tables.meta).from_select([*tables.scope_columns, "key", "version"], source)
    unique = [*tables.scope_columns, "key"]
    # An existing meta row is locked, not rewritten: ON CONFLICT DO UPDATE locks the row even where
    # its condition refuses the update (PostgreSQL writes no new row version for it).
    statement._post_values_clause = OnConflictUpdate(
        tables.meta.name, unique, [("version", tables.meta.c.version)], [], where=false()
    )
    return statement


@cache
def read_locked(tables: Tables, size: int) -> Select[Any]:
    """
    Each locked key's meta row (so none where the parent does not exist): key, parent id, and the
    row's value (NULL: none), version and expiry.
    """
    meta, rows = tables.meta.c, tables.rows.c
    return (
        select(meta.key, meta[tables.scope_columns[0]], rows.value, tables.version, tables.expires_at)
        .select_from(tables.meta.outerjoin(tables.rows, tables.same_key))
        .where(*tables.of_scope(tables.meta), _keys(meta.key, size))
    )


def _upsert(
    tables: Tables, table: Any, shared: tuple[str, ...], per_key: tuple[str, ...], size: int
) -> Insert:
    """INSERT a row per key (*per_key* bound per key, the scope and *shared* once), or replace it."""
    bound = {name: _bind(table, name) for name in (*tables.scope_columns, *shared)}
    rows = [bound | {name: _bind(table, name, n) for name in per_key} for n in range(size)]
    return _replacing(tables, insert(table).values(rows), (*per_key, *shared))


def _replacing(tables: Tables, statement: Insert, names: tuple[str, ...]) -> Insert:
    """*statement*, an INSERT of keys, replacing *names* of a key that exists (not its key nor its run)."""
    replaced = [(name, Proposed(name)) for name in names if name not in ("key", "dag_id", "run_id")]
    unique = [*tables.scope_columns, "key"]
    statement._post_values_clause = OnConflictUpdate(statement.table.name, unique, replaced, [])
    return statement


@cache
def writes(tables: Tables, size: int) -> tuple[Insert, Insert]:
    """
    Write Airflow's rows of the keys (value, time and the rest of :attr:`Tables.row_columns`), then
    our meta rows (version, time and the rest of :attr:`Tables.meta_columns`).
    """
    return (
        _upsert(tables, tables.rows, tables.row_columns, ("key", "value"), size),
        _upsert(tables, tables.meta, tables.meta_columns, ("key", "version"), size),
    )


@cache
def write_at_once(tables: Tables, size: int, while_running: bool = False) -> tuple[Insert, Select[Any]]:
    """
    For PostgreSQL (psycopg2), a write whose values do not depend on what is stored, sent as one
    string that the server runs as one transaction: :func:`lock`, then one statement that moves each
    key's meta row to the version after the one the key reads with (1 without a row), writes
    Airflow's rows of the meta rows it moved, as :func:`writes` would, and returns (key, version) of
    each. In READ COMMITTED each statement reads what was committed when it began, so the second
    reads after the lock, as :func:`read_locked` does; its parts read the same snapshot, so the
    version sees the rows before they are written. No parent, no meta row: nothing is written and
    nothing returned. So too, *while_running*, when the try ``:running_try`` of task instance
    ``:running_ti_id`` does not run.
    """
    meta = tables.meta.c
    version = func.coalesce(tables.version_looked_up, _literal(0)) + _literal(1)
    shared = {name: _bind(tables.meta, name) for name in tables.meta_columns}
    parent = tables.scope_columns[0]
    written = (
        update(tables.meta)
        .where(*tables.of_scope(tables.meta), _keys(meta.key, size), *([TRY_RUNS] if while_running else []))
        .values(version=version, **shared)
        .returning(meta.key, meta.version, meta[parent])
        .cte("written")
    )
    # Airflow's rows of the meta rows moved: the parent and the try were checked once, above.
    scope = (_bind(tables.rows, name) for name in tables.scope_columns[1:])
    shared_row = (_bind(tables.rows, name) for name in tables.row_columns)
    if size == 1:
        source = select(written.c[parent], *scope, written.c.key, _bind(tables.rows, "value", 0), *shared_row)
    else:
        batch = batch_rows(tables.rows, size)
        source = select(written.c[parent], *scope, batch.c.key, batch.c.value, *shared_row)
        source = source.select_from(written.join(batch, batch.c.key == written.c.key))
    names = ("value", *tables.row_columns)
    upsert = _replacing(
        tables, insert(tables.rows).from_select([*tables.scope_columns, "key", *names], source), names
    )
    written_both = select(written.c.key, written.c.version).add_cte(upsert.cte("rows_written"))
    return lock(tables, size, while_running), written_both


@cache
def deletes(tables: Tables, size: int, all_map_indices: bool = False) -> tuple[Delete, Delete]:
    """
    Delete the meta rows of the keys named (every key of the scope for *size* 0), then the rows:
    the meta rows first, through the rows that name them: after the rows, nothing would.
    """
    rows_of = tables.of_scope(all_map_indices=all_map_indices)
    if size:
        rows_of.append(_keys(tables.rows.c.key, size))
    meta = delete(tables.meta).where(exists().where(tables.same_key, *rows_of))
    return meta, delete(tables.rows).where(*rows_of)


#: Delete every key of a task scope whose current meta row records try ``:through_try`` or an earlier one.
DISCARD_WRITTEN_THROUGH_TRY = delete(TASK.rows).where(
    *TASK.of_scope(),
    exists().where(
        TASK.same_key,
        TASK.current,
        TASK.meta.c.updated_by_try <= bindparam("through_try", type_=Integer()),
    ),
)
