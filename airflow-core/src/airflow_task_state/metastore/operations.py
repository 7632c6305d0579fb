"""
Every metastore operation, defined once (a statement, its parameters and how to read the answer;
validated first, so bad input never reaches a database), and the two ways of running one: sync
(:func:`drive`) and async (:func:`adrive`).

A write that hands back what it wrote is a :class:`Write`: its RETURNING statement, and the
statement MySQL runs instead (see :mod:`.statements`). Which one runs is decided by the server the
connection reports (:func:`write_path`), unless the backend was built with a path; either way the
operation reads the same rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from contextlib import nullcontext
from datetime import UTC, datetime
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeAlias, TypeVar
from uuid import UUID

from airflow._shared.timezones import timezone
from airflow.utils.session import create_session_async
from airflow_shared.state import (
    StateCapabilityError,
    StateEntry,
    StateScope,
    StateWriter,
    TaskScope,
    VersionedValue,
    incremented,
    validate_discard,
    validate_increment,
    validate_key,
    validate_many_keys,
    validate_many_values,
    validate_scope,
    validate_value,
    validate_write_options,
    validate_writer,
)

from airflow_task_state.airflow_db import event_loop
from airflow_task_state.airflow_db.engine import (
    Outcome,
    autocommit_engine,
    committing_session,
    compiled_for,
    execute,
)
from airflow_task_state.exceptions import StateConflictError, TryNotRunning
from airflow_task_state.metastore import statements
from airflow_task_state.metastore.listing import entry
from airflow_task_state.metastore.statements import WritePath

if TYPE_CHECKING:
    from sqlalchemy import Connection, Executable
    from sqlalchemy.engine import Dialect
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

T = TypeVar("T")


class Write(NamedTuple):
    """
    A write whose SQL depends on the write path (:data:`.statements.WritePath`), and how a
    ``last_insert_id`` reply becomes the rows its RETURNING twin returns.
    """

    returning: Executable
    last_insert_id: Executable
    #: The RETURNING rows, from the reply's rowcount and LAST_INSERT_ID and the bound values.
    rows: Callable[[int, int, dict[str, Any]], list[tuple[Any, ...]]] | None = None
    #: Instead of *rows*: the SELECT whose rows they are, run next in the same transaction (a batch).
    read_back: Executable | None = None


class Operation(NamedTuple, Generic[T]):
    """
    One statement with its parameters, and how to read what it returned. *idempotent*: ``False``
    for a statement the engine must never send twice (see :mod:`~airflow_task_state.airflow_db.engine`).
    """

    statement: Executable | Write
    values: dict[str, Any]
    read: Callable[[Outcome], T]
    idempotent: bool = True


#: The steps of a call that may need more (or fewer) than one statement: each ``yield`` sends one
#: operation and receives what it read; the return value is the call's.
Flow: TypeAlias = Generator[Operation[Any], Any, T]
#: What a backend call runs: one operation, or a flow of them.
Work: TypeAlias = Operation[T] | Flow[T]

# --- reading outcomes ----------------------------------------------------------------------


def _ignored(outcome: Outcome) -> None:
    return None


def _upserted(returned: int, outcome: Outcome) -> tuple[Any, ...] | None:
    """
    The *returned* columns of a guarded upsert, or ``None`` when it wrote nothing: no dag run (or
    asset), or the guard refused (on MariaDB: the outcome column after them at 0, see :mod:`.statements`).
    """
    if not outcome.rows:
        return None
    row = outcome.rows[0]
    if len(row) > returned and row[returned] is not None and not int(row[returned]):
        return None
    return row[:returned]


def _signed(last_insert_id: int) -> int:
    # LAST_INSERT_ID is unsigned: a negative counter comes back as its two's complement.
    return last_insert_id - (1 << 64) if last_insert_id >= 1 << 63 else last_insert_id


def _version_rows(rowcount: int, last_insert_id: int, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    """An upsert's or a create's row: the version written; none for no row written or a refusal (0)."""
    return [(last_insert_id,)] if rowcount and last_insert_id else []


def _increment_rows(rowcount: int, last_insert_id: int, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    """
    An increment's (version, value) row. An update reports 2 rows and the new integer; an insert
    1 row and the new row's version, 1 (the value is ``by``); a refusal 0 (1 row, or none).
    """
    if rowcount == 2:
        return [(None, _signed(last_insert_id))]
    if rowcount and last_insert_id == 1:
        return [(1, values["by"])]
    return []


def missing_parent(scope: StateScope) -> ValueError:
    if isinstance(scope, TaskScope):
        return ValueError(
            f"No DagRun found for dag_id={scope.dag_id!r}, run_id={scope.run_id!r}: task state can "
            "only be written for an existing dag run"
        )
    return ValueError(
        f"No asset found with id {scope.asset_id}: asset state can only be written for an existing asset"
    )


def _written(scope: StateScope, outcome: Outcome) -> int:
    # An upsert writes (and returns) nothing when its SELECT finds no dag run (or asset).
    if not outcome.rows:
        raise missing_parent(scope)
    return int(outcome.rows[0][0])


def _stored(scope: StateScope, outcome: Outcome) -> None:
    _written(scope, outcome)  # ``set`` returns nothing


# --- the operations ------------------------------------------------------------------------


def _now() -> datetime:
    return timezone.utcnow()


def _simple(statement: str, read: Callable[[Outcome], T], scope: StateScope, *key: str) -> Operation[T]:
    """The statement named *statement* on *scope*'s (live) keys, or on the *key* given."""
    validate_scope(scope)
    for name in key:
        validate_key(name)
    values = statements.params(scope, *key)
    values["now"] = _now()
    return Operation(getattr(statements.for_scope(scope), statement), values, read)


def _row(read: Callable[[Any], T]) -> Callable[[Outcome], T | None]:
    """What *read* makes of the row a one-key read found; ``None`` when it found none."""
    return lambda outcome: read(outcome.rows[0]) if outcome.rows else None


def get_value(scope: StateScope, key: str) -> Operation[str | None]:
    return _simple("select_value", _row(itemgetter(0)), scope, key)


def get_versioned(scope: StateScope, key: str) -> Operation[VersionedValue | None]:
    return _simple("select_versioned", _row(lambda row: VersionedValue(*row)), scope, key)


def get_entry(scope: StateScope, key: str) -> Operation[StateEntry | None]:
    """One SELECT by primary key of the key's value and what a listing shows of it."""
    return _simple("select_entry", _row(partial(entry, scope)), scope, key)


def list_keys(scope: StateScope) -> Operation[list[str]]:
    # Sorted here, not in SQL: database collations order text differently from each other.
    return _simple("select_keys", lambda outcome: sorted(row[0] for row in outcome.rows), scope)


def _write_values(
    scope: StateScope,
    key: str | None,
    value: str | None,
    writer: StateWriter | None,
    expires_at: datetime | None,
) -> dict[str, Any]:
    """What every write binds: the scope (and key and value), the time, the expiry and the writer."""
    validate_writer(writer)
    values = statements.params(scope, key)
    values["value"] = value
    # Given here, not left to the model's default: the hot path sends no ORM defaults.
    values["updated_at"] = values["now"] = _now()
    values["expires_at"] = expires_at
    # StateWriter's fields are in the order of asset_state's writer columns; task_state's
    # statements take the last one only (the try).
    fields = (None,) * 6 if writer is None else (writer.kind.value, *writer.task_instance_and_try)
    values.update(zip(statements.ASSET_WRITER_COLUMNS, fields, strict=True))
    return values


def _write(
    name: Literal["upsert", "upsert_while_running", "create", "increment", "increment_while_running"],
    scope: StateScope,
) -> Write:
    """The statement named *name* of *scope*'s type, on either write path."""
    rows = _increment_rows if name.startswith("increment") else _version_rows
    return Write(
        getattr(statements.for_scope(scope), name),
        getattr(statements.for_scope(scope, "last_insert_id"), name),
        rows,
    )


def upsert(scope: StateScope, key: str, value: str, try_number: int | None = None) -> Operation[None]:
    """Store *value* for ever (``set``); *try_number* is recorded for task scopes (``updated_by_try``)."""
    validate_scope(scope)
    validate_key(key)
    validate_value(value)
    values = _write_values(scope, key, value, None, None)
    if isinstance(scope, TaskScope):
        values["updated_by_try"] = try_number
    return Operation(_write("upsert", scope), values, partial(_stored, scope))


def write(
    scope: StateScope,
    key: str,
    value: str,
    writer: StateWriter | None = None,
    expires_at: datetime | None = None,
    if_version: int | None = None,
) -> Flow[int]:
    """One statement in the usual case; a refused conditional write then reads the stored version."""
    validate_scope(scope)
    validate_key(key)
    validate_value(value)
    validate_write_options(expires_at, if_version)
    sql = statements.for_scope(scope)
    values = _write_values(scope, key, value, writer, expires_at)
    if if_version is None:
        return (yield Operation(_write("upsert", scope), values, partial(_written, scope)))
    if if_version > 0:
        values["if_version"] = if_version
        if (
            yield Operation(sql.update_if_version, values, lambda outcome: outcome.rowcount, idempotent=False)
        ):
            return if_version + 1
        stored = yield get_versioned(scope, key)
        raise StateConflictError(key, if_version, stored.version if stored else 0)
    for _attempt in range(2):
        created = yield Operation(_write("create", scope), values, partial(_upserted, 1), idempotent=False)
        if created is not None:
            return int(created[0])
        stored = yield get_versioned(scope, key)
        if stored is not None:
            raise StateConflictError(key, 0, stored.version)
        # Nothing live is stored, yet nothing was written: no dag run (or asset), unless the live
        # key was deleted in between; one more attempt tells.
        values["now"] = values["updated_at"] = _now()
    raise missing_parent(scope)


def write_while_running(
    scope: TaskScope,
    key: str,
    value: str,
    writer: StateWriter,
    expires_at: datetime | None,
    ti_id: str,
) -> Flow[int]:
    """
    :func:`write` without ``if_version`` by *writer*, a try of task instance *ti_id*, checking in
    its one statement that the try still runs (the state API's check of a write, folded in): nothing
    is written otherwise, and :class:`TryNotRunning` raised for the caller to find out why.
    """
    validate_scope(scope)
    validate_key(key)
    validate_value(value)
    validate_write_options(expires_at, None)
    values = _values_while_running(scope, key, value, writer, expires_at, ti_id)

    def version(outcome: Outcome) -> int:
        if not outcome.rows:
            raise TryNotRunning(ti_id)
        return int(outcome.rows[0][0])

    return (yield Operation(_write("upsert_while_running", scope), values, version))


def increment_while_running(
    scope: TaskScope, key: str, by: int, writer: StateWriter, expires_at: datetime | None, ti_id: str
) -> Flow[int]:
    """
    :func:`increment` by *writer*, a try of task instance *ti_id*, checking in its one statement
    that the try still runs. It adds nothing, and raises :class:`TryNotRunning`, when the try does
    not run and whenever :func:`increment` would need a second statement (a stored value the SQL
    does not add to): the caller's ordinary increment then checks the try and says why.
    """
    validate_scope(scope)
    validate_key(key)
    validate_increment(by)
    validate_write_options(expires_at, None)
    values = _values_while_running(scope, key, str(by), writer, expires_at, ti_id)
    values["by"] = by
    added = yield Operation(
        _write("increment_while_running", scope), values, partial(_upserted, 2), idempotent=False
    )
    if added is None:
        raise TryNotRunning(ti_id)
    return int(added[1])


def _values_while_running(
    scope: TaskScope, key: str, value: str, writer: StateWriter, expires_at: datetime | None, ti_id: str
) -> dict[str, Any]:
    """:func:`_write_values`, and the try whose running the statement checks."""
    values = _write_values(scope, key, value, writer, expires_at)
    values["running_ti_id"], values["running_try"] = UUID(ti_id), writer.try_number
    return values


def increment(
    scope: StateScope,
    key: str,
    by: int = 1,
    writer: StateWriter | None = None,
    expires_at: datetime | None = None,
) -> Flow[int]:
    """
    One statement in the usual case. When it refuses the stored value, a SELECT tells why: not an
    integer, or out of range (``ValueError``, nothing written); or an integer in a form the SQL
    does not take (``" 7"``, ``"007"``), which is then replaced by a versioned write.
    """
    validate_scope(scope)
    validate_key(key)
    validate_increment(by)
    validate_write_options(expires_at, None)
    absent_rounds = 0
    while True:
        values = _write_values(scope, key, str(by), writer, expires_at)
        values["by"] = by
        added = yield Operation(_write("increment", scope), values, partial(_upserted, 2), idempotent=False)
        if added is not None:
            return int(added[1])
        stored = yield get_versioned(scope, key)
        if stored is None:
            # Nothing live, yet nothing was written: no dag run (or asset), unless the key was
            # deleted in between.
            absent_rounds += 1
            if absent_rounds == 2:
                raise missing_parent(scope)
            continue
        result = incremented(key, stored.value, by)  # ValueError for what no increment accepts
        try:
            yield from write(scope, key, str(result), writer, expires_at, stored.version)
        except StateConflictError:
            continue
        return result


def delete_key(scope: StateScope, key: str) -> Operation[None]:
    return _simple("delete_key", _ignored, scope, key)


def clear(scope: StateScope, all_map_indices: bool = False) -> Operation[None]:
    return _simple("clear_all_map_indices" if all_map_indices else "clear", _ignored, scope)


def discard_written_through_try(scope: TaskScope, try_number: int) -> Operation[int]:
    """One DELETE of the scope's keys written by tries up to *try_number*: atomic, idempotent."""
    validate_discard(scope, try_number)
    values = statements.params(scope) | {"through_try": try_number}
    return Operation(statements.DISCARD_WRITTEN_THROUGH_TRY, values, lambda outcome: outcome.rowcount)


# --- batches: flows of one statement, or of none for no keys -------------------------------


def _text(key: str | bytes) -> str:
    # RETURNING is rendered outside SQLAlchemy's knowledge, so MySQL's keys (VARBINARY) come back as
    # bytes (a read-back SELECT decodes them).
    return key.decode("utf-8") if isinstance(key, bytes) else key


def get_many(scope: StateScope, keys: Iterable[str]) -> Flow[dict[str, str]]:
    """One SELECT of every key asked."""
    validate_scope(scope)
    wanted = validate_many_keys(keys, "get_many")
    if not wanted:
        return {}
    statement, values = statements.batch("select", scope, wanted)
    values["now"] = _now()
    return (yield Operation(statement, values, lambda outcome: {key: value for key, value in outcome.rows}))


def set_many(
    scope: StateScope,
    values: Mapping[str, str],
    writer: StateWriter | None = None,
    expires_at: datetime | None = None,
) -> Flow[dict[str, int | None]]:
    """One upsert of every pair (all or none)."""
    validate_scope(scope)
    checked = validate_many_values(values)
    validate_write_options(expires_at, None)
    if not checked:
        return {}
    statement, bound = statements.batch("upsert", scope, checked)
    bound |= _write_values(scope, None, None, writer, expires_at)
    write = Write(
        statement,
        statements.batch("upsert", scope, checked, "last_insert_id")[0],
        read_back=statements.batch("versions", scope, checked)[0],
    )

    def versions(outcome: Outcome) -> dict[str, int | None]:
        if not outcome.rows:
            raise missing_parent(scope)
        written: dict[str, int | None] = {_text(key): int(version) for key, version in outcome.rows}
        return {key: written[key] for key in checked}

    return (yield Operation(write, bound, versions))


def delete_many(scope: StateScope, keys: Iterable[str]) -> Flow[None]:
    """One DELETE of every key named."""
    validate_scope(scope)
    doomed = validate_many_keys(keys, "delete_many")
    if doomed:
        yield Operation(*statements.batch("delete", scope, doomed), _ignored)


# --- running them --------------------------------------------------------------------------


def write_path(dialect: Dialect) -> WritePath:
    """
    How writes hand back what they wrote on the server *dialect* is connected to: RETURNING, but
    on MySQL, which has none (MariaDB has it from 10.5 on), LAST_INSERT_ID.
    """
    if dialect.name != "mysql":
        return "returning"
    version = dialect.server_version_info
    if version is None:
        raise RuntimeError("the write path is chosen by the server's version: connect first")
    mariadb = getattr(dialect, "is_mariadb", False)  # a MySQL dialect's, known once connected
    return "returning" if mariadb and version >= (10, 5) else "last_insert_id"


def _autocommit_dialect() -> Dialect:
    """The autocommit engine's dialect, which knows its server once a first connection was made."""
    engine = autocommit_engine()
    if engine.dialect.name == "mysql" and engine.dialect.server_version_info is None:
        engine.raw_connection().close()  # the first connection tells the dialect the server's version
    return engine.dialect


def _last_insert_id_reply(
    write: Write, values: dict[str, Any], rowcount: int, last_id: int | None
) -> Outcome:
    assert write.rows is not None  # a Write without read_back has rows
    return Outcome(write.rows(rowcount, last_id or 0, values), rowcount)


def in_session(
    connection: Connection, statement: Executable, values: dict[str, Any], last_insert_id: bool = False
) -> Outcome:
    """*statement* run on a session's *connection*; with its LAST_INSERT_ID if *last_insert_id*."""
    compiled = compiled_for(statement, connection.dialect)
    result = connection.exec_driver_sql(compiled.sql, compiled.parameters(values))
    outcome = compiled.result_outcome(result)
    # lastrowid is read only where it means LAST_INSERT_ID: other drivers need not have it.
    return outcome._replace(last_insert_id=result.lastrowid) if last_insert_id else outcome


async def _in_async_session(
    connection: AsyncConnection, statement: Executable, values: dict[str, Any], last_insert_id: bool = False
) -> Outcome:
    """The async twin of :func:`in_session`."""
    compiled = compiled_for(statement, connection.dialect)
    result = await connection.exec_driver_sql(compiled.sql, compiled.parameters(values))
    outcome = compiled.result_outcome(result)
    return outcome._replace(last_insert_id=result.lastrowid) if last_insert_id else outcome


def _write_in_session(
    write: Write, values: dict[str, Any], connection: Connection, path: WritePath
) -> Outcome:
    if path == "returning":
        return in_session(connection, write.returning, values)
    written = in_session(connection, write.last_insert_id, values, last_insert_id=True)
    if write.read_back is None:
        return _last_insert_id_reply(write, values, written.rowcount, written.last_insert_id)
    # The rows just written stay locked by this transaction: the SELECT reads what it wrote.
    return in_session(connection, write.read_back, values) if written.rowcount else written


def _run_write(
    operation: Operation[Any], write: Write, session: Session | None, path: WritePath | None
) -> Outcome:
    if session is not None:
        connection = session.connection()
        return _write_in_session(write, operation.values, connection, path or write_path(connection.dialect))
    chosen = path or write_path(_autocommit_dialect())
    if chosen == "returning":
        return execute(write.returning, operation.values, idempotent=operation.idempotent)
    if write.read_back is not None:
        # Two statements, so one transaction (committed, or rolled back when a statement fails).
        with committing_session() as own:
            return _write_in_session(write, operation.values, own.connection(), chosen)
    written = execute(write.last_insert_id, operation.values, idempotent=operation.idempotent)
    return _last_insert_id_reply(write, operation.values, written.rowcount, written.last_insert_id)


#: The latest moment a MySQL ``TIMESTAMP`` column holds, as ``expires_at`` is there (as Airflow's own
#: times are): a later expiry would fail as a database error, so it is refused first, saying why.
MYSQL_TIMESTAMP_END = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)


def _check_expiry_fits(expires_at: datetime, dialect: Dialect) -> None:
    if dialect.name == "mysql" and expires_at > MYSQL_TIMESTAMP_END:
        raise StateCapabilityError(
            "The metastore on MySQL",
            f"an expiry after {MYSQL_TIMESTAMP_END:%Y-%m-%d %H:%M:%S} UTC (got {expires_at.isoformat()}), "
            "the end of MySQL's TIMESTAMP columns",
            "give a ttl that ends before, or none; nothing was written",
        )


def run(operation: Operation[T], session: Session | None, path: WritePath | None = None) -> T:
    """
    Run *operation* in *session* (the caller commits), or autocommitted on its own without one; a
    write as *path* says, else as the server's :func:`write_path`.
    """
    if (expires_at := operation.values.get("expires_at")) is not None:  # reads have none: no lookup
        _check_expiry_fits(
            expires_at, (autocommit_engine() if session is None else session.get_bind()).dialect
        )
    statement = operation.statement
    if isinstance(statement, Write):
        return operation.read(_run_write(operation, statement, session, path))
    if session is None:
        return operation.read(execute(statement, operation.values, idempotent=operation.idempotent))
    return operation.read(in_session(session.connection(), statement, operation.values))


# Marks a MySQL connection of the async engine on which this module set the session's time zone.
_UTC_SET = "airflow_state_time_zone_utc"


async def _utc_connection(db: AsyncSession) -> AsyncConnection:
    """
    The session's connection, in UTC on MySQL: TIMESTAMP columns (``expires_at``, ``updated_at``)
    are read and written in the session's time zone. Airflow sets it to UTC on each connection of
    its sync engine, not of its async one, so on a server in another time zone async calls would
    see expiries shifted by the difference. Once per pooled connection.
    """
    connection = await db.connection()
    if connection.dialect.name == "mysql" and not connection.info.get(_UTC_SET):
        await connection.exec_driver_sql("SET time_zone = '+00:00'")
        connection.info[_UTC_SET] = True
    return connection


async def arun(operation: Operation[T], session: AsyncSession | None, path: WritePath | None = None) -> T:
    """Run *operation* in *session* (the caller commits), or in a session of its own, committed."""
    async with create_session_async() if session is None else nullcontext(session) as db:
        connection = await _utc_connection(db)
        if (expires_at := operation.values.get("expires_at")) is not None:
            _check_expiry_fits(expires_at, connection.dialect)
        statement = operation.statement
        if not isinstance(statement, Write):
            return operation.read(await _in_async_session(connection, statement, operation.values))
        values = operation.values
        if (path or write_path(connection.dialect)) == "returning":
            return operation.read(await _in_async_session(connection, statement.returning, values))
        written = await _in_async_session(connection, statement.last_insert_id, values, last_insert_id=True)
        if statement.read_back is None:
            reply = _last_insert_id_reply(statement, values, written.rowcount, written.last_insert_id)
            return operation.read(reply)
        if not written.rowcount:
            return operation.read(written)
        return operation.read(await _in_async_session(connection, statement.read_back, values))


def drive(work: Work[T], session: Session | None, path: WritePath | None = None) -> T:
    """Run *work* (each operation of a flow in turn) with :func:`run`; return its result."""
    if isinstance(work, Operation):
        return run(work, session, path)
    try:
        operation = next(work)
        while True:
            operation = work.send(run(operation, session, path))
    except StopIteration as done:
        return done.value


async def adrive(work: Work[T], session: AsyncSession | None, path: WritePath | None = None) -> T:
    """Run *work* (each operation of a flow in turn) with :func:`arun`; return its result."""
    return await _adrive(work, lambda operation: arun(operation, session, path))


async def drive_on_event_loop(work: Work[T]) -> T:
    """
    Run *work* on the API server's event loop (:mod:`~airflow_task_state.airflow_db.event_loop`,
    where it is available): each operation one statement that returns rows and may run twice,
    a write by RETURNING.
    """
    return await _adrive(work, _run_on_event_loop)


async def _run_on_event_loop(operation: Operation[T]) -> T:
    statement = operation.statement
    assert operation.idempotent, "only statements that may run twice run on the event loop"
    returning = statement.returning if isinstance(statement, Write) else statement
    return operation.read(await event_loop.execute(returning, operation.values))


async def _adrive(work: Work[T], run_one: Callable[[Operation[Any]], Awaitable[Any]]) -> T:
    if isinstance(work, Operation):
        return await run_one(work)
    try:
        operation = next(work)
        while True:
            operation = work.send(await run_one(operation))
    except StopIteration as done:
        return done.value
