"""
Statements run on the API server's event loop: those of task code's plain gets and sets of one
key, on PostgreSQL through asyncpg (``[state] event_loop_statements``).

Through the sync driver each statement goes to a worker thread and back, about 100 µs on a 2-core
machine and more under load, and PostgreSQL plans it again each time. On the event loop there is
no hop, and asyncpg prepares each statement once per connection (its statement cache), so the
server plans it once (``bench/bench_floor.py``). The statements are the same ones, compiled for
asyncpg.

The engine is built as Airflow builds its own async engine, by ``create_async_metadata_engine``
(deployment hooks in ``airflow_local_settings`` apply), from ``[database] sql_alchemy_conn_async``
(by default derived from ``sql_alchemy_conn``) and ``sql_alchemy_connect_args_async``: behind
PgBouncer in transaction mode before 1.21, ``statement_cache_size: 0`` there serves both.

As in :mod:`.engine`: one autocommitted statement (or, for a set on Airflow 3.3, a transaction of
two), no ping. Only statements that give the same result run twice come here (a read, a plain
write), so one whose connection is lost runs once more on a fresh connection; a second loss raises
an error that says the database is unavailable (503). Every other statement, and every other
database, stays on :mod:`.engine` in a thread. On a server's loop the connections are kept between
statements and closed as the server's lifespan ends (:func:`serve_here`, :func:`dispose`).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import nullcontext
from functools import cache
from typing import TYPE_CHECKING, Any

from airflow import settings
from airflow.configuration import conf
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import QueuePool

from airflow_task_state import config
from airflow_task_state.airflow_db.engine import Outcome, compiled_for

if TYPE_CHECKING:
    from sqlalchemy import Executable
    from sqlalchemy.ext.asyncio import AsyncEngine


class _Engine:
    """The engine of one event loop, and the connections it keeps between statements."""

    def __init__(self, engine: AsyncEngine, keep: bool) -> None:
        self.engine = engine
        pool = engine.sync_engine.pool
        kept = pool.size() if isinstance(pool, QueuePool) else 0  # else a pool of a deployer's choice
        # At most as many statements at once as the pool keeps connections: past that,
        # SQLAlchemy's pool opens connections it closes as soon as they come back, and under load
        # every request would wait for a new one (bench_load.py at 20 clients: 650 requests/s,
        # not 2,100). A statement takes a fraction of a millisecond: a few connections serve
        # hundreds of requests.
        self.statements: asyncio.Semaphore | nullcontext[None] = (
            asyncio.Semaphore(kept) if kept else nullcontext()
        )
        # Connections taken from the pool once and kept for the next statement: a checkout and its
        # return cost 35 µs, a sixth of a read. At most as many as the pool keeps (the semaphore),
        # and only on a server's loop (*keep*), whose end closes them (see serve_here). With a pool
        # of the deployer's choice (NullPool, for one) each goes back after its statement.
        self._idle: list[Any] | None = [] if kept and keep else None

    async def connection(self) -> Any:
        """A connection of the pool (SQLAlchemy's proxy) for one statement, or one transaction."""
        return self._idle.pop() if self._idle else await self.engine.raw_connection()

    def done(self, connection: Any) -> None:
        """*connection*, whose statement ended (run or refused by the server), kept or given back."""
        if self._idle is not None:
            self._idle.append(connection)
        else:
            connection.close()

    async def replace(self) -> None:
        """After a lost connection: every connection is a new one from now on (a restart kills them all)."""
        for connection in self._take_idle():
            connection.invalidate()
        await self.engine.dispose()

    async def close(self) -> None:
        for connection in self._take_idle():
            connection.close()
        await self.engine.dispose()

    def _take_idle(self) -> list[Any]:
        idle = self._idle or []
        if self._idle is not None:
            self._idle = []
        return idle


# (pid, event loop) the engine serves: asyncpg's connections belong to the loop that opened them.
_cached: tuple[tuple[int, asyncio.AbstractEventLoop], _Engine] | None = None
# The loop of the server whose lifespan has started (serve_here), until it ends (dispose).
_served: asyncio.AbstractEventLoop | None = None


def serve_here() -> None:
    """
    As a server's lifespan starts, on its loop: the engine there keeps connections between
    statements, and :func:`dispose` closes them as the lifespan ends. Elsewhere (``dag.test()``'s
    in-process API, which has no lifespan) each goes back to the pool after its statement, so that
    none is left open for the garbage collector at exit.
    """
    global _served
    _served = asyncio.get_running_loop()


def available() -> bool:
    """Whether this process's statements may run on the event loop: PostgreSQL through asyncpg, and on."""
    url = settings.SQL_ALCHEMY_CONN_ASYNC
    return url is not None and _through_asyncpg(url) and config.event_loop_statements()


@cache  # asked on every plain request
def _through_asyncpg(url: str) -> bool:
    return make_url(url).drivername == "postgresql+asyncpg"


def _engine() -> _Engine:
    global _cached
    owner = (os.getpid(), asyncio.get_running_loop())
    if _cached is not None and _cached[0] == owner:
        return _cached[1]
    if _cached is not None:
        # Another loop's (a test client's, now closed): its connections cannot be closed from here.
        _cached[1].engine.sync_engine.dispose(close=False)
    url = settings.SQL_ALCHEMY_CONN_ASYNC
    assert url is not None, "only where available()"
    connect_args = conf.getimport("database", "sql_alchemy_connect_args_async", fallback=None) or {}
    engine = settings.create_async_metadata_engine(url, connect_args=connect_args)
    built = _Engine(engine, keep=owner[1] is _served)
    _cached = (owner, built)
    return built


async def dispose() -> None:
    """Close the connections of the running loop's engine (as a server's lifespan ends)."""
    global _cached, _served
    loop = asyncio.get_running_loop()
    if _served is loop:
        _served = None
    if _cached is not None and _cached[0] == (os.getpid(), loop):
        engine, _cached = _cached[1], None
        await engine.close()


@cache  # imported on first use: a process that never serves a plain request never imports asyncpg
def _asyncpg_errors() -> tuple[tuple[type[BaseException], ...], type[Exception]]:
    """What asyncpg raises for a lost connection, and for a statement the server refused."""
    import asyncpg

    # A connection that is gone, or a server that cannot serve it now (restarting, shutting down,
    # in recovery): SQLSTATE class 08, 57P01-57P03. asyncpg refuses to use a connection whose
    # server ended it while it was idle (InternalClientError: "another operation is in progress").
    lost = (
        OSError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
        asyncpg.PostgresConnectionError,
        asyncpg.AdminShutdownError,
        asyncpg.CrashShutdownError,
        asyncpg.CannotConnectNowError,
    )
    return lost, asyncpg.PostgresError


async def execute(statement: Executable | tuple[Executable, ...], values: dict[str, Any]) -> Outcome:
    """
    *statement*, which returns rows and gives the same result run twice, with *values*, autocommitted
    on the running loop's engine (see the module's docstring); only when :func:`available`. A tuple
    of statements runs in one transaction (asyncpg sends each on its own), the last one's rows
    returned: run twice, it too must give the same result.
    """
    engine = _engine()
    every = statement if isinstance(statement, tuple) else (statement,)
    compiled = [compiled_for(each, engine.engine.dialect) for each in every]
    sent = [(each.sql, each.parameters(values)) for each in compiled]
    async with engine.statements:
        return compiled[-1].outcome(*await _fetched(engine, sent))


async def _fetched(engine: _Engine, sent: list[tuple[str, Any]]) -> tuple[list[Any], int]:
    """The rows of the last of the statements *sent* (SQL, parameters), and their number."""
    lost, refused = _asyncpg_errors()
    for last in (False, True):
        try:
            connection = await engine.connection()
        except lost as error:  # the server cannot be reached: a retry would wait for nothing
            raise _unavailable(sent[-1][0], error) from error
        driver_connection: Any = connection.driver_connection  # asyncpg's, as SQLAlchemy opened it
        try:
            if len(sent) == 1:
                rows = await driver_connection.fetch(sent[0][0], *sent[0][1])
            else:
                async with driver_connection.transaction():  # rolled back when a statement raises
                    for sql, parameters in sent:
                        rows = await driver_connection.fetch(sql, *parameters)
        except lost as error:
            connection.invalidate(error)
            await engine.replace()  # the retry, and every later statement, gets a new connection
            if last:
                raise _unavailable(sent[-1][0], error) from error
            continue
        except refused as error:
            engine.done(connection)
            raise DBAPIError(sent[-1][0], None, error, hide_parameters=True) from error
        except BaseException:  # cancelled mid-statement: the connection's state is unknown
            connection.invalidate()
            raise
        engine.done(connection)
        return rows, len(rows)
    raise AssertionError("unreachable")


def _unavailable(sql: str, error: BaseException) -> OperationalError:
    return OperationalError(sql, None, error, hide_parameters=True, connection_invalidated=True)
