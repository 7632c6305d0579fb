"""
How state calls made without a caller's session reach the database: one statement each, in
autocommit, straight on a pooled DBAPI cursor; or, for a write that needs several (Airflow 3.3's
layout), one transaction on one such connection (:func:`transaction`).

A single statement is atomic by itself, so it needs no BEGIN and COMMIT round trips, while
Airflow's own engine pings every connection it hands out (pool_pre_ping) and would flip each one
into autocommit and back. The engine here is built from the same settings, through Airflow's own
factory (so deployment hooks in ``airflow_local_settings`` apply), but it stays in autocommit and
does not ping. A connection found dead is replaced, and the statement runs once more, if that is
safe: a lost connection may have lost only the reply of a statement the server ran and committed.
Reads, plain writes and deletes give the same result run twice. An increment, a create-only write
or a conditional write do not, so their callers say so (``idempotent=False``): such a statement is
sent on a pooled connection only after a ping found it alive, is retried only when it was never
sent, and otherwise raises :class:`StatementOutcomeUnknownError`.

SQLAlchemy's ``Connection`` layer (autobegin, rollback, result set-up) costs more per call than a
PostgreSQL read's own round trip (``bench/bench_metastore.py`` measures it), so statements that
SQLAlchemy compiled once run on the DBAPI cursor: SQLAlchemy's cursor events
(``before_cursor_execute``) do not fire for them. Errors are still raised as SQLAlchemy's
``DBAPIError`` subclasses, which do not list the parameters: stored values may be secrets.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from airflow import settings
from airflow.configuration import conf
from airflow.utils.orm_event_handlers import setup_event_handlers
from airflow.utils.session import create_session
from sqlalchemy import Select, event
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError, StatementError

from airflow_task_state import config

if TYPE_CHECKING:
    from sqlalchemy import Engine, Executable
    from sqlalchemy.engine import Dialect
    from sqlalchemy.orm import Session
    from sqlalchemy.sql.compiler import SQLCompiler


class Outcome(NamedTuple):
    """What a statement returned: its rows, with values converted as SQLAlchemy would, and its rowcount."""

    rows: list[tuple[Any, ...]]
    rowcount: int
    #: The cursor's ``lastrowid``: on MySQL, what the statement gave ``LAST_INSERT_ID(expr)``
    #: (how the metastore's writes hand back a version where there is no RETURNING).
    last_insert_id: int | None = None


T = TypeVar("T")


class Run(Protocol):
    """
    How :func:`transaction`'s work sends *statements* (in order, with *values*), and reads what the
    last one returned. *last*: nothing but the COMMIT follows them, sent with them (no rows returned).
    """

    def __call__(
        self, statements: Sequence[Executable], values: dict[str, Any], last: bool = False
    ) -> Outcome: ...


class _Compiled:
    """
    A statement compiled for one dialect: its SQL, and the conversions of its parameters and results.

    State statements use plain named bind parameters only (nothing expanding, nothing rendered
    after compilation), so the compiled string and the bind processors are all there is to it.
    """

    def __init__(self, statement: Executable | tuple[Executable, ...], dialect: Dialect) -> None:
        # Several statements go as one string (PostgreSQL runs them as one transaction); their
        # parameters by name, the last one's rows returned.
        every = statement if isinstance(statement, tuple) else (statement,)
        statement = every[-1]
        # Executable does not declare compile(); every statement passed here is a ClauseElement.
        compiled: list[SQLCompiler] = [each.compile(dialect=dialect) for each in every]  # type: ignore[attr-defined]
        assert len(every) == 1 or not compiled[0].positional, "statements together need named parameters"
        self.sql = "; ".join(each.string for each in compiled)
        self._to_driver = {
            name: convert
            for each in compiled
            for name, bind in each.binds.items()
            if (convert := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        # A positional driver's parameters in their order, each with its conversion (or None).
        self._positions = (
            [(name, self._to_driver.get(name)) for name in compiled[0].positiontup or ()]
            if compiled[0].positional
            else None
        )
        columns = statement.selected_columns if isinstance(statement, Select) else ()
        #: Whether the statement changes anything (what a lost reply may leave applied).
        self.writes = not all(isinstance(each, Select) for each in every)
        self._from_driver = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def parameters(self, values: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        if self._positions is not None:
            return tuple([values[name] if to is None else to(values[name]) for name, to in self._positions])
        to_driver = self._to_driver
        return {name: to_driver[name](v) if name in to_driver else v for name, v in values.items()}

    def outcome(self, rows: Sequence[Any], rowcount: int, last_insert_id: int | None = None) -> Outcome:
        """The :class:`Outcome` of *rows* as the driver returned them (none for a statement without rows)."""
        if not any(self._from_driver):
            return Outcome([tuple(row) for row in rows], rowcount, last_insert_id)
        converters = self._from_driver
        converted = [
            tuple(f(value) if f else value for f, value in zip(converters, row, strict=True)) for row in rows
        ]
        return Outcome(converted, rowcount, last_insert_id)

    def result_outcome(self, result: Any) -> Outcome:
        """The :class:`Outcome` of a SQLAlchemy ``CursorResult`` of :attr:`sql` (``exec_driver_sql``)."""
        return self.outcome(result.fetchall() if result.returns_rows else [], result.rowcount)


class StatementOutcomeUnknownError(OperationalError):
    """
    The connection was lost after a statement that must not run twice (an increment, a
    create-only or conditional write) was sent: the server may have run and committed it, or not.
    It is not sent again. Like every lost connection it counts as the database being unavailable
    (:func:`is_unavailable`: the state API answers 503 ``database_unavailable``, which the task's
    client does not retry for such a request either).
    """

    def __str__(self) -> str:
        return (
            "the connection to the metadata database was lost after the statement was sent, so it may "
            "or may not have been applied; it is not sent again, since applying it twice would be wrong "
            f"(an increment, a conditional write): read the key to find out ({self.orig})"
        )


# What the engine notes in a DBAPI connection's ``info``, which SQLAlchemy empties whenever the pool
# opens a new connection: when it was opened, and that it has run one of our statements.
_OPENED_AT = "airflow_state.opened_at"
_SERVED = "airflow_state.served"


class _AutocommitEngine:
    """An autocommit engine, and how a statement runs on it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._dialect = engine.dialect
        # Connections opened before this time (time.monotonic()) were found dead, or may be: each
        # is closed and reopened at its next checkout (see _run). SQLAlchemy's pool keeps such a
        # time too, but only its Connection layer (bypassed here) sets it; its public events and
        # ``info`` do the same job.
        self._invalidated_at = 0.0
        # psycopg2 binds parameters in the client and sends a query string as one message: the
        # statements of a transaction go together, one round trip, each still a statement of its
        # own (with its own snapshot).
        self._together = engine.dialect.driver == "psycopg2"
        event.listen(engine, "connect", _note_opened)
        event.listen(engine, "checkout", self._reopen_if_invalidated)

    def _reopen_if_invalidated(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        # The pool closes a connection whose checkout raises this, and hands out a new one instead.
        if record.info.get(_OPENED_AT, 0.0) < self._invalidated_at:
            raise DisconnectionError("opened before a connection of the same pool was found dead")

    def execute(
        self, statement: Executable | tuple[Executable, ...], values: dict[str, Any], idempotent: bool
    ) -> Outcome:
        compiled = compiled_for(statement, self._dialect)
        parameters = compiled.parameters(values)
        lost_after_sending: _Lost | None = None  # a write the server may have run, its reply lost
        for last in (False, True):
            try:
                return self._run(compiled, parameters, idempotent)
            except _Lost as lost:
                if lost.sent and compiled.writes:
                    lost_after_sending = lost
                if (lost.sent and not idempotent) or (last and lost_after_sending):
                    raise _outcome_unknown(compiled.sql, parameters, lost) from lost.error
                if last:
                    raise lost.error from lost.__cause__
            except DBAPIError as error:
                # Sent again after its reply was lost, and refused now (the server is gone): the
                # first attempt may still have been applied.
                if lost_after_sending is not None and is_unavailable(error):
                    raise _outcome_unknown(compiled.sql, parameters, lost_after_sending) from error
                raise
        raise AssertionError("unreachable")

    def _run(self, compiled: _Compiled, parameters: Any, idempotent: bool) -> Outcome:
        sending = _Sending(compiled.sql, parameters)
        with self._cursor(sending) as (connection, cursor):
            if _served_before(connection) and not idempotent:
                # A connection the server dropped is found before a statement that must not run
                # twice is sent on it, as SQLAlchemy's pre-ping would: a ping costs less than an
                # outcome unknown after every database restart.
                assert connection.dbapi_connection is not None  # checked out, so connected
                self._dialect.do_ping(connection.dbapi_connection)
            sending.applies = True
            cursor.execute(compiled.sql, parameters)
            return _fetched(cursor, compiled)

    def transaction(self, work: Callable[[Run], T]) -> T:
        for last in (False, True):
            try:
                return self._transact(work)
            except _Lost as lost:
                if lost.sent:
                    raise _outcome_unknown("COMMIT", None, lost) from lost.error
                if last:
                    raise lost.error from lost.__cause__
        raise AssertionError("unreachable")

    def _transact(self, work: Callable[[Run], T]) -> T:
        sending = _Sending("BEGIN", ())
        committed = False

        def run(statements: Sequence[Executable], values: dict[str, Any], last: bool = False) -> Outcome:
            nonlocal committed
            assert not committed, "nothing is sent after the last statements"
            compiled = [compiled_for(statement, self._dialect) for statement in statements]
            parts: list[tuple[str, Any]] = [(each.sql, each.parameters(values)) for each in compiled]
            parts = ([] if sending.open else [("BEGIN", ())]) + parts + ([("COMMIT", ())] if last else [])
            if self._together:
                merged = {
                    name: value for _, parameters in parts for name, value in (parameters or {}).items()
                }
                parts = [("; ".join(sql for sql, _ in parts), merged)]
            for position, (sql, parameters) in enumerate(parts, 1):
                sending.sql, sending.parameters, sending.open = sql, parameters, True
                sending.applies = last and position == len(parts)  # the COMMIT is in flight
                cursor.execute(sql, parameters)
            if last:
                sending.open, committed = False, True
                return Outcome([], cursor.rowcount)
            return _fetched(cursor, compiled[-1])

        with self._cursor(sending) as (connection, cursor):
            # No ping: a connection lost before COMMIT was sent applied nothing, so the whole
            # transaction is sent again on a fresh connection.
            _served_before(connection)
            result = work(run)
            if not committed:
                run([], {}, last=True)
            return result

    @contextmanager
    def _cursor(self, sending: _Sending) -> Iterator[tuple[Any, Any]]:
        """
        A pooled connection and its cursor. A driver error raised in the block is raised as
        SQLAlchemy's (as :class:`_Lost` for a lost connection); a transaction *sending* left open
        is rolled back.
        """
        dbapi_error = self._dialect.loaded_dbapi.Error
        connection = cursor = None
        try:
            connection = self.engine.raw_connection()
            cursor = connection.cursor()
            yield connection, cursor
        except dbapi_error as error:
            disconnected = self._dialect.is_disconnect(error, connection, cursor)
            if disconnected and connection is not None:
                # A connection the server dropped is rarely alone: after a restart every pooled
                # connection is dead, and replacing only this one would hand the retry the next
                # dead one. So, as SQLAlchemy's Connection does on a disconnect, the invalidation
                # time moves to now: each connection opened before (pooled or checked out by
                # another thread) is closed and reopened at its next checkout. A failure of a
                # connection opened after that time (a second restart) moves it again; one of a
                # connection opened before (another thread's, in flight) does not. Then this
                # connection is invalidated and returned.
                if connection.info.get(_OPENED_AT, 0.0) >= self._invalidated_at:
                    self._invalidated_at = time.monotonic()
                if connection.is_valid:
                    connection.invalidate(error)
            elif sending.open:
                _roll_back(connection, cursor, dbapi_error)
            wrapped = DBAPIError.instance(
                sending.sql,
                sending.parameters,
                error,
                dbapi_error,
                hide_parameters=True,
                connection_invalidated=disconnected,
                dialect=self._dialect,
            )
            if disconnected:
                raise _Lost(wrapped, error, sending.applies) from error
            raise wrapped from error
        except BaseException:
            if sending.open:
                _roll_back(connection, cursor, dbapi_error)
            raise
        finally:
            if connection is not None:
                if cursor is not None and connection.is_valid:
                    cursor.close()
                connection.close()


class _Sending:
    """What a connection is sending: the SQL and parameters (for errors), and where it stands."""

    def __init__(self, sql: str, parameters: Any) -> None:
        self.sql = sql
        self.parameters = parameters
        #: A transaction is open on the connection (it must end before the pool takes it back).
        self.open = False
        #: What was sent may have applied something, its reply lost (a statement, or a COMMIT).
        self.applies = False


def _fetched(cursor: Any, compiled: _Compiled) -> Outcome:
    rows = cursor.fetchall() if cursor.description else []
    # Not every driver's cursor has lastrowid (psycopg's has not); only MySQL's is read.
    return compiled.outcome(rows, cursor.rowcount, getattr(cursor, "lastrowid", None))


def _roll_back(connection: Any, cursor: Any, dbapi_error: type[Exception]) -> None:
    # The pool resets nothing on return (pool_reset_on_return=None): the transaction ends here.
    try:
        cursor.execute("ROLLBACK")
    except dbapi_error as error:
        connection.invalidate(error)  # in an unknown state: never handed out again


def _note_opened(dbapi_connection: Any, record: Any) -> None:
    record.info[_OPENED_AT] = time.monotonic()


def _served_before(connection: Any) -> bool:
    """Whether a pooled connection ran statements before this checkout (not when just opened)."""
    served = connection.info.get(_SERVED, False)
    connection.info[_SERVED] = True
    return served


def _outcome_unknown(sql: str, parameters: Any, lost: _Lost) -> StatementOutcomeUnknownError:
    return StatementOutcomeUnknownError(
        sql, parameters, lost.driver_error, hide_parameters=True, connection_invalidated=True
    )


@contextmanager
def committing_session() -> Iterator[Session]:
    """
    Airflow's ``create_session`` (committed at the end, rolled back when the block raises), for a
    write of several statements; the connection lost while its COMMIT is in flight raises
    :class:`StatementOutcomeUnknownError`: the server may have committed it.
    """
    with create_session() as session:
        yield session
        try:
            session.commit()
        except DBAPIError as error:
            if not is_unavailable(error):
                raise
            raise StatementOutcomeUnknownError(
                "COMMIT", None, error.orig or error, hide_parameters=True, connection_invalidated=True
            ) from error


class _Lost(Exception):
    """The connection was lost (*error*, and the driver's own); *sent*: the statement may have run."""

    def __init__(self, error: StatementError, driver_error: BaseException, sent: bool) -> None:
        super().__init__(error)
        self.error = error
        self.driver_error = driver_error
        self.sent = sent


# Statements compiled per dialect and driver (the autocommit engine's, and the sync and async
# drivers of callers' sessions).
_compiled: dict[tuple[Executable | tuple[Executable, ...], str, str], _Compiled] = {}


def compiled_for(statement: Executable | tuple[Executable, ...], dialect: Dialect) -> _Compiled:
    """
    *statement* compiled for *dialect*, once. Callers' sessions run it with ``exec_driver_sql``:
    SQLAlchemy returns no rows from an INSERT whose RETURNING it did not render itself.
    """
    cache_key = (statement, dialect.name, dialect.driver)
    compiled = _compiled.get(cache_key)
    if compiled is None:
        compiled = _compiled.setdefault(cache_key, _Compiled(statement, dialect))
    return compiled


_lock = threading.Lock()
# (pid, Airflow's engine) the cached engine was derived from, and the engine itself.
_cached: tuple[tuple[int, int], _AutocommitEngine] | None = None


def _build() -> Engine:
    engine_args = settings.prepare_engine_args()
    engine_args.pop("pool_pre_ping", None)
    if "pool_size" in engine_args:  # absent with SQLite or a disabled pool (NullPool)
        engine_args["pool_size"] = config.database_pool_size()
    engine_args["isolation_level"] = "AUTOCOMMIT"
    # Nothing to roll back on return: no transaction is ever open. MySQL drivers would otherwise
    # send a ROLLBACK each time.
    engine_args["pool_reset_on_return"] = None
    connect_args = conf.getimport("database", "sql_alchemy_connect_args", fallback=None) or {}
    url = settings.SQL_ALCHEMY_CONN
    if url is None:
        raise RuntimeError("[database] sql_alchemy_conn is not configured")
    if url.startswith("sqlite"):
        # Calls come from API server threads; Airflow's own engine allows the same.
        connect_args["check_same_thread"] = False
    engine = settings.create_metadata_engine(url, engine_args=engine_args, connect_args=connect_args)
    # The same per-connection set-up as Airflow's engine (SQLite pragmas, MySQL UTC time zone).
    setup_event_handlers(engine)
    return engine


def _autocommit_engine() -> _AutocommitEngine:
    """This process's autocommit engine, rebuilt after a fork or an ORM reconfiguration."""
    global _cached
    owner = (os.getpid(), id(settings.engine))
    cached = _cached
    if cached is not None and cached[0] == owner:
        return cached[1]
    with _lock:
        if _cached is None or _cached[0] != owner:
            if _cached is not None and _cached[0][0] == owner[0]:
                _cached[1].engine.dispose()
            # After a fork the parent's connections are left alone: they are the parent's.
            _cached = (owner, _AutocommitEngine(_build()))
        return _cached[1]


def autocommit_engine() -> Engine:
    """This process's autocommit engine (for its pool and dialect)."""
    return _autocommit_engine().engine


def execute(
    statement: Executable | tuple[Executable, ...], values: dict[str, Any], *, idempotent: bool = True
) -> Outcome:
    """
    Run *statement* with *values* as one autocommitted statement (see the module's docstring). It is
    compiled on first use and kept: pass statements built once, not per call. A tuple of statements
    is sent as one string, which only PostgreSQL's psycopg2 takes: the server runs them as one
    transaction, each statement with a snapshot of its own, and the last one's rows come back.
    """
    return _autocommit_engine().execute(statement, values, idempotent)


def transaction(work: Callable[[Run], T]) -> T:
    """
    Call *work* with a :class:`Run` that sends statements (built once, as for :func:`execute`) in one
    transaction on one pooled connection: BEGIN, then *work*'s statements, then COMMIT, or ROLLBACK
    when *work* raises. A connection lost before the COMMIT was sent applied nothing: *work* is
    called once more, on a fresh connection (so it must read what it decides on). One lost while the
    COMMIT was in flight raises :class:`StatementOutcomeUnknownError`.
    """
    return _autocommit_engine().transaction(work)


# What drivers say when they cannot reach the server at all. Such errors come from connecting, not
# from a connection in use, so the dialects do not count them as disconnects.
# SQLSTATEs: class 08 connection exceptions; PostgreSQL's 57P01 admin_shutdown, 57P02
# crash_shutdown and 57P03 cannot_connect_now (starting up, shutting down, in recovery).
_UNAVAILABLE_SQLSTATES = ("08000", "08001", "08003", "08006", "57P01", "57P02", "57P03")
# MySQL and MariaDB error numbers: 2002 and 2003 cannot connect (socket, TCP), 2006 server has gone
# away, 2013 and 2055 connection lost during a query, 1053 server shutdown in progress, 1927
# connection killed (MariaDB), 4031 disconnected by the server for inactivity.
_UNAVAILABLE_MYSQL_ERRORS = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031})
# libpq's messages (psycopg2 and psycopg attach no SQLSTATE to a failure to connect).
_UNAVAILABLE_MESSAGES = (
    "connection refused",
    "could not connect to server",
    "no such file or directory",  # the server's Unix socket is gone: it is not running
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "server closed the connection unexpectedly",
    "terminating connection",
    "no route to host",
    "network is unreachable",
    "timeout expired",
)


def is_unavailable(error: BaseException) -> bool:
    """
    Whether *error* says the database could not be reached (down, starting up, shutting down or
    recovering, or the network failed: the call may succeed later), rather than that a statement
    failed (constraint violations, syntax errors, missing tables). Never for SQLite: it has no server.
    """
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    driver_error = error.orig if isinstance(error, OperationalError) else None
    if driver_error is None or type(driver_error).__module__.startswith("sqlite3"):
        return False
    sqlstate = getattr(driver_error, "pgcode", None) or getattr(driver_error, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in _UNAVAILABLE_SQLSTATES
    code = driver_error.args[0] if driver_error.args else None
    if isinstance(code, int):  # MySQL drivers: (error number, message)
        return code in _UNAVAILABLE_MYSQL_ERRORS
    message = str(driver_error).lower()
    return any(part in message for part in _UNAVAILABLE_MESSAGES)
