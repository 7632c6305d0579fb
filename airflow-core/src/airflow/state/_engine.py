"""
How state calls made without a caller's session reach the database: one statement each, in
autocommit, straight on a pooled DBAPI cursor.

Each such call is a single statement, atomic by itself, so it needs no BEGIN and COMMIT round
trips. Airflow's own engine pings every connection it hands out (pool_pre_ping) and would flip
each one into autocommit and back. The engine here is built from the same settings, through
Airflow's own factory (so deployment hooks in ``airflow_local_settings`` apply), but it stays in
autocommit and does not ping. A connection found dead is replaced, and the statement runs once
more; every state statement is idempotent.

SQLAlchemy compiles each statement once per engine and supplies its type conversions. The
statement then runs on the DBAPI cursor of a pooled connection, without SQLAlchemy's
``Connection`` layer. That layer (autobegin, rollback, result set-up) costs more per call than a
PostgreSQL read's own round trip: ``bench/bench_metastore.py`` measures the difference. One
consequence: SQLAlchemy's cursor events (``before_cursor_execute``) do not fire for these
statements. Errors are still raised as SQLAlchemy's ``DBAPIError`` subclasses, which do not list
the parameters: stored values may be secrets.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow import settings
from airflow.configuration import conf
from sqlalchemy import Select
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from sqlalchemy import Engine, Executable
    from sqlalchemy.engine import Dialect


class Outcome(NamedTuple):
    """What a statement returned: its rows, with values converted as SQLAlchemy would, and its rowcount."""

    rows: list[tuple[Any, ...]]
    rowcount: int


class _Compiled:
    """
    A statement compiled for one dialect: its SQL, and the conversions of its parameters and results.

    State statements use plain named bind parameters only (nothing expanding, nothing rendered
    after compilation), so the compiled string and the bind processors are all there is to it.
    """

    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        self._positions = list(compiled.positiontup) if compiled.positional else None
        self._to_driver = {
            name: convert
            for name, bind in compiled.binds.items()
            if (convert := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        columns = statement.selected_columns if isinstance(statement, Select) else ()
        self._from_driver = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def parameters(self, values: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        converted = {
            name: self._to_driver[name](value) if name in self._to_driver else value
            for name, value in values.items()
        }
        if self._positions is None:
            return converted
        return tuple(converted[name] for name in self._positions)

    def outcome(self, cursor: Any) -> Outcome:
        if cursor.description is None:
            return Outcome([], cursor.rowcount)
        rows = cursor.fetchall()
        if any(self._from_driver):
            rows = [self._converted(row) for row in rows]
        return Outcome(rows, cursor.rowcount)

    def _converted(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        pairs = zip(self._from_driver, row, strict=True)
        return tuple(convert(value) if convert else value for convert, value in pairs)


class _AutocommitEngine:
    """An autocommit engine and the statements compiled for it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._dialect = engine.dialect
        self._compiled: dict[Executable, _Compiled] = {}

    def execute(self, statement: Executable, values: dict[str, Any]) -> Outcome:
        compiled = self._compiled.get(statement)
        if compiled is None:
            compiled = self._compiled.setdefault(statement, _Compiled(statement, self._dialect))
        parameters = compiled.parameters(values)
        try:
            return self._run(compiled, parameters)
        except DBAPIError as error:
            if not error.connection_invalidated:
                raise
        return self._run(compiled, parameters)

    def _run(self, compiled: _Compiled, parameters: Any) -> Outcome:
        dbapi_error = self._dialect.loaded_dbapi.Error
        connection = cursor = None
        try:
            connection = self.engine.raw_connection()
            cursor = connection.cursor()
            cursor.execute(compiled.sql, parameters)
            return compiled.outcome(cursor)
        except dbapi_error as error:
            disconnected = self._dialect.is_disconnect(error, connection, cursor)
            if disconnected and connection is not None:
                connection.invalidate(error)
            raise DBAPIError.instance(
                compiled.sql,
                parameters,
                error,
                dbapi_error,
                hide_parameters=True,
                connection_invalidated=disconnected,
                dialect=self._dialect,
            ) from error
        finally:
            if cursor is not None and connection.is_valid:
                cursor.close()
            if connection is not None:
                connection.close()


_lock = threading.Lock()
# (pid, Airflow's engine) the cached engine was derived from, and the engine itself.
_cached: tuple[tuple[int, int], _AutocommitEngine] | None = None


def _build() -> Engine:
    from airflow.utils.orm_event_handlers import setup_event_handlers

    engine_args = settings.prepare_engine_args()
    engine_args.pop("pool_pre_ping", None)
    engine_args["isolation_level"] = "AUTOCOMMIT"
    # Nothing to roll back on return: no transaction is ever open. MySQL drivers would otherwise
    # send a ROLLBACK each time.
    engine_args["pool_reset_on_return"] = None
    connect_args = (
        conf.getimport("database", "sql_alchemy_connect_args")
        if conf.has_option("database", "sql_alchemy_connect_args")
        else {}
    )
    if settings.SQL_ALCHEMY_CONN.startswith("sqlite"):
        # Calls come from API server threads; Airflow's own engine allows the same.
        connect_args["check_same_thread"] = False
    engine = settings.create_metadata_engine(
        settings.SQL_ALCHEMY_CONN, engine_args=engine_args, connect_args=connect_args
    )
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


def execute(statement: Executable, values: dict[str, Any]) -> Outcome:
    """
    Run *statement* with *values* as one autocommitted statement, once more if the connection was
    dead. *statement* is compiled on first use and kept: pass statements built once, not per call.
    """
    return _autocommit_engine().execute(statement, values)
