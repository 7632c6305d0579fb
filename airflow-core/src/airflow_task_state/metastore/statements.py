"""
The SQL behind MetastoreStateBackend (docs/metastore.md says why each call is
one statement): the statements of each scope type, built once at import with bound parameters only,
so that SQLAlchemy (and the autocommit engine) compile each once per dialect.

A guarded upsert (``if_version=0``, ``increment``) returns no row on PostgreSQL and SQLite when its
condition does not hold (``DO UPDATE ... WHERE``). MariaDB has no ``WHERE`` there: each assignment
keeps the stored value unless the condition holds, the first one records the condition in a session
variable, and ``RETURNING`` reports it (NULL: inserted, 1: updated, 0: left as it was). The source
``SELECT`` resets the variable, so a value left by an earlier statement on the connection is never
read. Reads skip expired keys: ``expires_at IS NULL OR expires_at > :now``, *now* bound from Python.

MySQL 8 has no ``RETURNING`` (among MySQL-dialect servers only MariaDB 10.5+ has it), so its writes
take the other :data:`WritePath`, ``last_insert_id``: the statement hands back one number through
``LAST_INSERT_ID(expr)``, which the server reports in the same reply as the affected rows (the
DBAPI cursor's ``lastrowid``); no second statement, no session variable. The state tables have no
AUTO_INCREMENT column, so nothing else sets that number. Its source ``SELECT`` inserts the version
as ``LAST_INSERT_ID(1)``; the update assigns ``version`` first, as ``LAST_INSERT_ID(version + 1)``
when it applies and ``LAST_INSERT_ID(0)`` when its condition refuses, and every later assignment
applies only where ``LAST_INSERT_ID() > 0``. So the reply carries the written version, or 0 for a
refusal; an increment's last assignment replaces it with the new integer (an update then reports
2 affected rows, an insert 1). A batch hands back nothing: :func:`batch` gives the ``SELECT`` of
its versions, run next in the same transaction, where the rows it wrote are still locked.

This module only builds SQL; :mod:`airflow_task_state.metastore.operations` says what each call sends
and how to read the answer, and runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Literal, NamedTuple

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow_shared.state import MAX_COUNTER, MIN_COUNTER, StateScope, TaskScope
from sqlalchemy import (
    BigInteger,
    Delete,
    Executable,
    Insert,
    Integer,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    case,
    cast,
    delete,
    exists,
    insert,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ClauseElement, ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel

_task = TaskStateModel.__table__
_asset = AssetStateModel.__table__
_dag_run = DagRun.__table__
_asset_row = AssetModel.__table__
_task_instance = TaskInstance.__table__

#: The MariaDB session variable that carries an upsert's condition to its RETURNING clause.
_OUTCOME_VARIABLE = "@airflow_state_applied"

#: How a write hands back what it wrote: ``RETURNING`` (PostgreSQL, SQLite, MariaDB 10.5+), or
#: ``LAST_INSERT_ID(expr)`` (MySQL, which has no RETURNING; see the module's docstring).
WritePath = Literal["returning", "last_insert_id"]
WRITE_PATHS: tuple[WritePath, ...] = ("returning", "last_insert_id")


class Statements(NamedTuple):
    """The statements of one scope type; their parameters are those of :func:`params` and more."""

    #: The value of ``:key`` if live (``now``).
    select_value: Select[Any]
    #: The value and version of ``:key`` if live (``now``).
    select_versioned: Select[Any]
    #: Every live key of the scope (``now``).
    select_keys: Select[Any]
    #: What a listing shows of every live key (``now``): ``key``, ``value``, ``updated_at``,
    #: ``version``, ``expires_at``, then the writer's columns (:func:`.listing.entry` reads them).
    select_entries: Select[Any]
    #: :attr:`select_entries` of ``:key`` alone.
    select_entry: Select[Any]
    #: Insert or replace ``:key`` (``value``, ``updated_at``, ``expires_at`` and the writer
    #: columns); returns the new version, or no row when the dag run (or asset) does not exist.
    upsert: Executable
    #: :attr:`upsert` only where the key is absent or expired (``now`` too): returns no row (or,
    #: on MariaDB, the outcome 0) when a live key is stored. On the ``last_insert_id`` path these
    #: three hand back through LAST_INSERT_ID what they would return (see the module's docstring).
    create: Executable
    #: :attr:`upsert` by the try ``:running_try`` of task instance ``:running_ti_id``, only while
    #: that try runs: returns no row otherwise, as when the dag run does not exist.
    upsert_while_running: Executable
    #: Replace ``:key`` only at version ``if_version`` and live (``now``); rowcount 0 otherwise.
    update_if_version: Update
    #: Add ``by`` to the integer stored under ``:key`` (``value`` is ``str(by)``, what an absent or
    #: expired key becomes); returns the new version and value, or nothing (outcome 0 on MariaDB)
    #: when the stored value is no integer or the sum leaves 64 bits.
    increment: Executable
    #: :attr:`increment` by the try ``:running_try`` of task instance ``:running_ti_id``, only
    #: while that try runs: returns nothing otherwise, as for a value it cannot add to.
    increment_while_running: Executable
    delete_key: Delete
    #: Delete every key of the scope (of its own map index, for a task scope).
    clear: Delete
    #: Delete every key of the task in the run, whatever the map index (``clear`` for asset scopes).
    clear_all_map_indices: Delete


def params(scope: StateScope, key: str | None = None) -> dict[str, Any]:
    """The bound parameters that identify *scope* (and *key*) in every statement of :class:`Statements`."""
    values = {name: getattr(scope, name) for name in _SCOPE_TABLES[_kind(scope)].scope_fields}
    if key is not None:
        values["key"] = key
    return values


# --- SQL constructs SQLAlchemy has no cacheable form of --------------------------------------


class Proposed(ColumnElement[Any]):
    """The value the INSERT proposed for a column: ``excluded.col``, ``VALUES(col)`` on MySQL."""

    __visit_name__ = "state_proposed"
    inherit_cache = False
    _traverse_internals = [("name", InternalTraversal.dp_string)]

    def __init__(self, name: str) -> None:
        self.name = name


@compiles(Proposed)
def _proposed(element: Proposed, compiler: Any, **kw: Any) -> str:
    return f"excluded.{compiler.preparer.quote(element.name)}"


@compiles(Proposed, "mysql")
def _proposed_mysql(element: Proposed, compiler: Any, **kw: Any) -> str:
    # VALUES(col) rather than a row alias: MariaDB has no row aliases, and MySQL allows no alias
    # on INSERT ... SELECT.
    return f"VALUES({compiler.preparer.quote(element.name)})"


class _ResetOutcome(ColumnElement[Any]):
    """A true condition that, on MariaDB, also clears :data:`_OUTCOME_VARIABLE` first."""

    __visit_name__ = "state_reset_outcome"
    inherit_cache = True
    _traverse_internals: list[Any] = []


@compiles(_ResetOutcome)
def _always_true(element: _ResetOutcome, compiler: Any, **kw: Any) -> str:
    return "1 = 1"


@compiles(_ResetOutcome, "mysql")
def _reset_outcome(element: _ResetOutcome, compiler: Any, **kw: Any) -> str:
    return f"({_OUTCOME_VARIABLE} := NULL) IS NULL"


class _CounterSum(ColumnElement[Any]):
    """
    *stored* + *by* as a 64-bit integer when *stored* is the text of one and the sum stays in
    range; NULL otherwise. Only canonical integer text counts (no sign but ``-``, no leading
    zeros, no spaces); the backend handles the rare other forms Python accepts.
    """

    __visit_name__ = "state_counter_sum"
    inherit_cache = False
    _traverse_internals = [
        ("stored", InternalTraversal.dp_clauseelement),
        ("by", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, stored: Any, by: Any) -> None:
        self.stored = stored
        self.by = by


_CANONICAL_INTEGER = "^(0|-?[1-9][0-9]{0,18})$"


@compiles(_CounterSum, "postgresql")
@compiles(_CounterSum, "mysql")
def _counter_sum(element: _CounterSum, compiler: Any, **kw: Any) -> str:
    stored, by = compiler.process(element.stored, **kw), compiler.process(element.by, **kw)
    # Nested CASEs: PostgreSQL does not promise to evaluate AND's operands in order, and casting a
    # non-number raises. NUMERIC (DECIMAL(21, 0)) holds any 19-digit sum exactly.
    matches, exact, integer = {
        "postgresql": ("~", "NUMERIC", "BIGINT"),
        "mysql": ("REGEXP", "DECIMAL(21, 0)", "SIGNED"),
    }[compiler.dialect.name]
    total = f"(CAST({stored} AS {exact}) + {by})"
    return (
        f"CASE WHEN {stored} {matches} '{_CANONICAL_INTEGER}' THEN CASE WHEN {total} BETWEEN {MIN_COUNTER} "
        f"AND {MAX_COUNTER} THEN CAST({total} AS {integer}) END END"
    )


@compiles(_CounterSum, "sqlite")
def _counter_sum_sqlite(element: _CounterSum, compiler: Any, **kw: Any) -> str:
    stored, by = compiler.process(element.stored, **kw), compiler.process(element.by, **kw)
    # Text that survives a round trip through INTEGER is canonical and within 64 bits (a larger
    # one saturates); SQLite turns an overflowing integer sum into a REAL.
    as_integer = f"CAST({stored} AS INTEGER)"
    return (
        f"CASE WHEN CAST({as_integer} AS TEXT) = {stored} AND typeof({as_integer} + {by}) = 'integer' "
        f"THEN {as_integer} + {by} END"
    )


class OnConflictUpdate(ClauseElement):
    """
    ``ON CONFLICT (...) DO UPDATE [WHERE ...] RETURNING ...`` / ``ON DUPLICATE KEY UPDATE ...
    RETURNING ...``, rendered after a plain INSERT for each dialect: the statements are built once,
    before any dialect is known (SQLAlchemy's upserts are dialect-specific constructs, and it would
    refuse RETURNING on a MariaDB dialect that has not connected yet).

    :param assignments: (column, expression) pairs, in order; on MariaDB later assignments see the
        values earlier ones stored, so the condition is evaluated by the first one only.
    :param where: apply the update only where this holds (see the module's docstring).
    """

    __visit_name__ = "state_on_conflict_update"
    inherit_cache = False
    _traverse_internals = [
        ("conflict_columns", InternalTraversal.dp_string_list),
        ("assigned", InternalTraversal.dp_string_list),
        ("expressions", InternalTraversal.dp_clauseelement_list),
        ("where", InternalTraversal.dp_clauseelement),
        ("returning", InternalTraversal.dp_string_list),
        ("table_name", InternalTraversal.dp_string),
    ]

    def __init__(
        self,
        table_name: str,
        conflict_columns: list[str],
        assignments: list[tuple[str, Any]],
        returning: list[str],
        where: Any = None,
    ) -> None:
        self.table_name = table_name
        self.conflict_columns = conflict_columns
        self.assigned = [name for name, _ in assignments]
        self.expressions = [expression for _, expression in assignments]
        self.where = where
        self.returning = returning


@compiles(OnConflictUpdate)
def _unsupported(clause: OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    raise NotImplementedError(
        f"MetastoreStateBackend supports PostgreSQL, MySQL/MariaDB and SQLite, not {compiler.dialect.name!r}"
    )


@compiles(OnConflictUpdate, "postgresql")
@compiles(OnConflictUpdate, "sqlite")
def _on_conflict_do_update(clause: OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    quote = compiler.preparer.quote
    conflict = ", ".join(quote(c) for c in clause.conflict_columns)
    updates = ", ".join(
        f"{quote(name)} = {compiler.process(expression, **kw)}"
        for name, expression in zip(clause.assigned, clause.expressions, strict=True)
    )
    where = "" if clause.where is None else f" WHERE {compiler.process(clause.where, **kw)}"
    returning = _returning([quote(c) for c in clause.returning])
    return f"ON CONFLICT ({conflict}) DO UPDATE SET {updates}{where}{returning}"


@compiles(OnConflictUpdate, "mysql")
def _on_duplicate_key_update(clause: OnConflictUpdate, compiler: Any, **kw: Any) -> str:
    # SQLAlchemy's MySQL drivers connect with CLIENT_FOUND_ROWS, so an update counts in the
    # rowcount even when it changes nothing; RETURNING needs MariaDB 10.5+.
    quote = compiler.preparer.quote
    updates = []
    for position, (name, expression) in enumerate(zip(clause.assigned, clause.expressions, strict=True)):
        rendered = compiler.process(expression, **kw)
        if clause.where is not None:
            condition = (
                f"({_OUTCOME_VARIABLE} := ({compiler.process(clause.where, **kw)}))"
                if position == 0
                else _OUTCOME_VARIABLE
            )
            # Qualified: the source SELECT's tables (dag_run) have columns of the same names.
            rendered = f"IF({condition}, {rendered}, {quote(clause.table_name)}.{quote(name)})"
        updates.append(f"{quote(name)} = {rendered}")
    returning = [quote(c) for c in clause.returning]
    if clause.where is not None:
        returning.append(_OUTCOME_VARIABLE)
    return f"ON DUPLICATE KEY UPDATE {', '.join(updates)}{_returning(returning)}"


def _returning(columns: list[str]) -> str:
    """The RETURNING clause of *columns* (rendered); none without."""
    return f" RETURNING {', '.join(columns)}" if columns else ""


class _OnDuplicateKeyLastInsertId(ClauseElement):
    """
    ``ON DUPLICATE KEY UPDATE ...`` for MySQL, which has no RETURNING: ``version`` is assigned
    first and, with *report*, hands back through ``LAST_INSERT_ID(expr)`` what RETURNING would
    (see the module's docstring).

    :param assignments: (column, expression) pairs, in order, ``version`` among them.
    :param where: apply the update only where this holds; evaluated once, by ``version``'s
        assignment, before any column it reads has been assigned.
    :param report: ``"version"``: the version written (0: *where* refused); ``"value"``: the
        integer stored by an applied increment instead; ``None``: nothing (batches).
    """

    __visit_name__ = "state_on_duplicate_key_last_insert_id"
    inherit_cache = False
    _traverse_internals = [
        ("assigned", InternalTraversal.dp_string_list),
        ("expressions", InternalTraversal.dp_clauseelement_list),
        ("where", InternalTraversal.dp_clauseelement),
        ("report", InternalTraversal.dp_string),
        ("table_name", InternalTraversal.dp_string),
    ]

    def __init__(
        self, table_name: str, assignments: list[tuple[str, Any]], where: Any, report: str | None
    ) -> None:
        self.table_name = table_name
        version_first = sorted(assignments, key=lambda pair: pair[0] != "version")
        self.assigned = [name for name, _ in version_first]
        self.expressions = [expression for _, expression in version_first]
        self.where = where
        self.report = report


@compiles(_OnDuplicateKeyLastInsertId)
def _last_insert_id_elsewhere(clause: _OnDuplicateKeyLastInsertId, compiler: Any, **kw: Any) -> str:
    raise NotImplementedError(
        f"the last_insert_id write path is MySQL's; {compiler.dialect.name!r} writes with RETURNING"
    )


@compiles(_OnDuplicateKeyLastInsertId, "mysql")
def _on_duplicate_key_last_insert_id(clause: _OnDuplicateKeyLastInsertId, compiler: Any, **kw: Any) -> str:
    quote = compiler.preparer.quote
    table = quote(clause.table_name)
    updates = []
    last = len(clause.assigned) - 1
    for position, (name, expression) in enumerate(zip(clause.assigned, clause.expressions, strict=True)):
        # Qualified: the source SELECT's tables (dag_run) have columns of the same names.
        stored = f"{table}.{quote(name)}"
        rendered = compiler.process(expression, **kw)
        if name == "version":
            if clause.report is not None:
                rendered = f"LAST_INSERT_ID({rendered})"
            if clause.where is not None:
                # Refused: the version stays, and LAST_INSERT_ID becomes 0 (adding its 0 keeps it).
                rendered = (
                    f"IF({compiler.process(clause.where, **kw)}, {rendered}, {stored} + LAST_INSERT_ID(0))"
                )
        else:
            if clause.report == "value" and position == last:
                # Every assignment before this one saw the version's LAST_INSERT_ID; now the
                # increment's result replaces it (``value`` is already the new integer's text).
                rendered = (
                    f"IF(LAST_INSERT_ID(CAST({table}.{quote('value')} AS SIGNED)) IS NULL, NULL, {rendered})"
                )
            if clause.where is not None:
                rendered = f"IF(LAST_INSERT_ID() > 0, {rendered}, {stored})"
        updates.append(f"{quote(name)} = {rendered}")
    return f"ON DUPLICATE KEY UPDATE {', '.join(updates)}"


# --- the statements ----------------------------------------------------------------------------


# A literal, not a bound parameter: the autocommit engine binds only the parameters it is given.
_ONE = literal_column("1", Integer())


def _bind(table: Any, name: str) -> Any:
    """A bound parameter typed as *table*'s column *name* (keys as bytes on MySQL, UTC datetimes)."""
    return bindparam(name, type_=table.c[name].type)


def _now(table: Any) -> Any:
    return bindparam("now", type_=table.c.expires_at.type)


def live(table: Any) -> Any:
    """Expired keys are invisible to every read, even before clean-up removes them."""
    return or_(table.c.expires_at.is_(None), table.c.expires_at > _now(table))


def _expired(table: Any) -> Any:
    return and_(table.c.expires_at.is_not(None), table.c.expires_at <= _now(table))


class _ScopeTable(NamedTuple):
    """A scope type's table: the only thing its statements differ in from the other type's."""

    table: Any
    #: The fields of the scope that its statements bind, by the same names.
    scope_fields: tuple[str, ...]
    #: The row the state hangs on (the dag run, the asset), found by ``parent_filter``.
    parent: Any
    parent_filter: list[Any]
    #: The columns an upsert fills before ``key`` and ``value``, and what it fills them with.
    parent_columns: list[str]
    parent_values: list[Any]
    #: The columns that record the last writer.
    writer_columns: list[str]
    #: The rows of the scope, by the primary key's leading columns (so that no statement's cost
    #: grows with the table nor with the keys of the scope).
    scope_filter: list[Any]
    #: The rows of the task in its run, whatever the map index (``scope_filter`` for assets).
    all_map_indices: list[Any]

    @property
    def written(self) -> list[str]:
        """What every write replaces besides ``value``; ``expires_at`` last (see ``OnConflictUpdate``)."""
        return ["updated_at", *self.writer_columns, "expires_at"]

    def source(self, key: Any, value: Any, batch: Any = None) -> Select[Any]:
        """The SELECT an upsert inserts from: the parent's row (none when missing) with the row written."""
        written = (_bind(self.table, name) for name in self.written)
        source = select(*self.parent_values, key, value, *written).where(*self.parent_filter)
        return source if batch is None else source.select_from(self.parent.join(batch, true()))

    def upsert(
        self,
        source: Select[Any],
        returning: list[str],
        value: Any = None,
        where: Any = None,
        path: WritePath = "returning",
    ) -> Insert:
        """
        Insert from *source* or, for a stored key, write *value* (the proposed one by default).
        On the ``last_insert_id`` path, *returning* picks what LAST_INSERT_ID reports: the new
        ``value`` when it is returned, else the ``version``; nothing for a batch (``key`` returned).
        """
        assignments = [
            ("value", Proposed("value") if value is None else value),
            ("version", self.table.c.version + _ONE),
            *((name, Proposed(name)) for name in self.written),
        ]
        columns = [*self.parent_columns, "key", "value", *self.written]
        if path == "returning":
            upsert = insert(self.table).from_select(columns, source)
            conflict = [column.name for column in self.table.primary_key]  # what an upsert conflicts on
            upsert._post_values_clause = OnConflictUpdate(
                self.table.name, conflict, assignments, returning, where
            )
            return upsert
        report = None if "key" in returning else "value" if "value" in returning else "version"
        if report is not None:
            # A new row's version, 1, reported as the update's would be.
            source = source.add_columns(literal_column("LAST_INSERT_ID(1)", Integer()))
            columns.append("version")
        upsert = insert(self.table).from_select(columns, source)
        upsert._post_values_clause = _OnDuplicateKeyLastInsertId(self.table.name, assignments, where, report)
        return upsert


_run_filter = [_dag_run.c.dag_id == bindparam("dag_id"), _dag_run.c.run_id == bindparam("run_id")]
# The task in its run, as task_state's primary key starts: (dag_run_id, task_id).
_same_task = [
    _task.c.dag_run_id == select(_dag_run.c.id).where(*_run_filter).scalar_subquery(),
    _task.c.task_id == bindparam("task_id"),
]
_TASK_SCOPE = _ScopeTable(
    table=_task,
    scope_fields=("dag_id", "run_id", "task_id", "map_index"),
    parent=_dag_run,
    parent_filter=_run_filter,
    parent_columns=["dag_run_id", "dag_id", "run_id", "task_id", "map_index"],
    parent_values=[
        _dag_run.c.id,
        _dag_run.c.dag_id,
        _dag_run.c.run_id,
        _bind(_task, "task_id"),
        bindparam("map_index", type_=Integer()),
    ],
    writer_columns=["updated_by_try"],
    scope_filter=[*_same_task, _task.c.map_index == bindparam("map_index")],
    all_map_indices=_same_task,
)

#: The asset_state columns of the last writer, as operations name them in parameters.
ASSET_WRITER_COLUMNS = (
    "updated_by",
    "updated_by_dag_id",
    "updated_by_run_id",
    "updated_by_task_id",
    "updated_by_map_index",
    "updated_by_try",
)

_same_asset = [_asset.c.asset_id == bindparam("asset_id")]
_ASSET_SCOPE = _ScopeTable(
    table=_asset,
    scope_fields=("asset_id",),
    parent=_asset_row,
    parent_filter=[_asset_row.c.id == bindparam("asset_id")],
    parent_columns=["asset_id"],
    parent_values=[_asset_row.c.id],
    writer_columns=list(ASSET_WRITER_COLUMNS),
    scope_filter=_same_asset,
    all_map_indices=_same_asset,
)


#: The task instance ``:running_ti_id`` runs its try ``:running_try``: the check a write by a try
#: makes in its own statement (a primary-key lookup), instead of a statement before it.
TRY_RUNS = exists().where(
    _task_instance.c.id == bindparam("running_ti_id", type_=_task_instance.c.id.type),
    _task_instance.c.state == literal_column("'running'"),
    _task_instance.c.try_number == bindparam("running_try", type_=Integer()),
)


def _statements(scope: _ScopeTable, path: WritePath) -> Statements:
    table = scope.table
    one_key = [*scope.scope_filter, table.c.key == bindparam("key")]
    source = scope.source(_bind(table, "key"), _bind(table, "value"))
    # The MariaDB outcome variable is RETURNING's; the other path leaves session variables alone.
    guarded_source = source.where(_ResetOutcome()) if path == "returning" else source
    counter = _CounterSum(table.c.value, bindparam("by", type_=BigInteger()))

    def add_to_counter(source: Select[Any]) -> Executable:
        expired_or_added = or_(_expired(table), counter.is_not(None))
        added = case((_expired(table), Proposed("value")), else_=cast(counter, Text()))
        return scope.upsert(source, ["version", "value"], added, expired_or_added, path)

    entry_columns = ("key", "value", "updated_at", "version", "expires_at", *scope.writer_columns)
    select_entries = select(*(table.c[name] for name in entry_columns)).where(
        *scope.scope_filter, live(table)
    )
    return Statements(
        select_value=select(table.c.value).where(*one_key, live(table)),
        select_versioned=select(table.c.value, table.c.version).where(*one_key, live(table)),
        select_keys=select(table.c.key).where(*scope.scope_filter, live(table)),
        select_entries=select_entries,
        select_entry=select_entries.where(one_key[-1]),
        upsert=scope.upsert(source, ["version"], path=path),
        upsert_while_running=scope.upsert(source.where(TRY_RUNS), ["version"], path=path),
        create=scope.upsert(guarded_source, ["version"], where=_expired(table), path=path),
        update_if_version=update(table)
        .where(*one_key, table.c.version == bindparam("if_version"), live(table))
        .values(
            value=_bind(table, "value"),
            version=table.c.version + _ONE,
            **{name: _bind(table, name) for name in scope.written},
        ),
        increment=add_to_counter(guarded_source),
        increment_while_running=add_to_counter(guarded_source.where(TRY_RUNS)),
        delete_key=delete(table).where(*one_key),
        clear=delete(table).where(*scope.scope_filter),
        clear_all_map_indices=delete(table).where(*scope.all_map_indices),
    )


#: Delete every key of a task scope last written by try ``:through_try`` or an earlier one (not
#: those written outside a try, whose ``updated_by_try`` is NULL).
DISCARD_WRITTEN_THROUGH_TRY = delete(_task).where(
    *_TASK_SCOPE.scope_filter,
    _task.c.updated_by_try.is_not(None),
    _task.c.updated_by_try <= bindparam("through_try", type_=Integer()),
)

_SCOPE_TABLES = {"task": _TASK_SCOPE, "asset": _ASSET_SCOPE}
_STATEMENTS = {
    (kind, path): _statements(scope_table, path)
    for kind, scope_table in _SCOPE_TABLES.items()
    for path in WRITE_PATHS
}


def _kind(scope: StateScope) -> str:
    """The type of a scope callers have validated (``validate_scope``)."""
    return "task" if isinstance(scope, TaskScope) else "asset"


def for_scope(scope: StateScope, path: WritePath = "returning") -> Statements:
    """The statements that read and write the state of *scope*'s type; writes as *path* hands back."""
    return _STATEMENTS[_kind(scope), path]


# --- batches: get_many, set_many, delete_many ------------------------------------------------
#
# A batch of n keys binds ``key_0`` ... ``key_<n-1>`` (and ``value_<i>`` for set_many), so each
# statement is still built once per size and compiled once per dialect, like the rest. Reads and
# deletes round n up to a power of two, repeating the last key (harmless in an IN list), so at
# most 11 statements of each exist; an upsert cannot repeat a key, so it is built per exact size.

#: Rows per UNION ALL: SQLite allows at most 500 terms in one compound SELECT.
_UNION_TERMS = 250


def batch_rows(table: Any, count: int, names: Sequence[str] = ("key", "value")) -> Any:
    """
    ``(SELECT :key_0 AS key, :value_0 AS value UNION ALL ...)``: the pairs of a set_many (or the
    columns *names* of *table*, each row binding ``<name>_<n>``); past :data:`_UNION_TERMS` rows, a
    UNION ALL of such groups, each a subquery of its own.
    """
    rows = [
        select(*(bindparam(f"{name}_{n}", type_=table.c[name].type).label(name) for name in names))
        for n in range(count)
    ]
    if count <= _UNION_TERMS:
        return (rows[0] if count == 1 else union_all(*rows)).subquery("batch")
    groups = []
    for start in range(0, count, _UNION_TERMS):
        group = union_all(*rows[start : start + _UNION_TERMS]).subquery(f"rows_{start}")
        groups.append(select(*(group.c[name] for name in names)))
    return union_all(*groups).subquery("batch")


@cache
def _batch(what: str, kind: str, size: int, path: WritePath) -> Executable:
    scope = _SCOPE_TABLES[kind]
    table = scope.table
    if what == "upsert":
        rows = batch_rows(table, size)
        return scope.upsert(scope.source(rows.c.key, rows.c.value, rows), ["key", "version"], path=path)
    keys = table.c.key.in_([bindparam(f"key_{n}", type_=table.c.key.type) for n in range(size)])
    if what == "select":
        return select(table.c.key, table.c.value).where(*scope.scope_filter, keys, live(table))
    if what == "versions":
        return select(table.c.key, table.c.version).where(*scope.scope_filter, keys)
    return delete(table).where(*scope.scope_filter, keys)


def batch(
    what: Literal["select", "delete", "upsert", "versions"],
    scope: StateScope,
    pairs: Sequence[str] | Mapping[str, str],
    path: WritePath = "returning",
) -> tuple[Executable, dict[str, Any]]:
    """
    The statement of a batch of *scope* and its parameters but ``now`` and those of a write:

    - ``select``: the live keys and values among the keys *pairs* names;
    - ``delete``: delete them;
    - ``upsert``: insert or replace the key-value *pairs*, all with the same ``updated_at``,
      ``expires_at`` and writer columns; returns the key and new version of each, or no row when
      the dag run (or asset) does not exist. One statement: all pairs are written, or none. On
      the ``last_insert_id`` *path* it returns nothing, and ``versions`` (the key and version of
      each key named, expired or not), run next in the same transaction, reads what it wrote.
    """
    keys = padded(list(pairs)) if what in ("select", "delete") else list(pairs)
    values = params(scope) | {f"key_{n}": key for n, key in enumerate(keys)}
    if isinstance(pairs, Mapping):
        values |= {f"value_{n}": value for n, value in enumerate(pairs.values())}
    return _batch(what, _kind(scope), len(keys), path if what == "upsert" else "returning"), values


def padded(keys: list[str]) -> list[str]:
    """*keys*, the last one repeated up to a power of two of them (harmless in an IN list)."""
    return keys + keys[-1:] * ((1 << max(len(keys) - 1, 0).bit_length()) - len(keys))


#: The state tables, for clean-up.
CLEANED_TABLES = (_task, _asset)
