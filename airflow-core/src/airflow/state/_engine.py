"""
The engine behind single-statement state calls made without a caller's session.

Each such call is one statement, atomic by itself, so it runs in autocommit: no BEGIN and
COMMIT round trips. Airflow's own pool pings every connection it hands out (pool_pre_ping) and
would flip each one into autocommit and back; together that doubles the cost of a state read.
This engine is built from the same settings, through Airflow's own factory (so deployment hooks in
``airflow_local_settings`` apply), but stays in autocommit and does not ping: a connection found
dead is replaced and the statement, idempotent like every state statement, runs once more.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from airflow import settings
from airflow.configuration import conf
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

T = TypeVar("T")

_lock = threading.Lock()
# (pid, Airflow's engine) the cached engine was derived from, and the engine itself.
_cached: tuple[tuple[int, int], Engine] | None = None


def _build() -> Engine:
    from airflow.utils.orm_event_handlers import setup_event_handlers

    engine_args = settings.prepare_engine_args()
    engine_args.pop("pool_pre_ping", None)
    engine_args["isolation_level"] = "AUTOCOMMIT"
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


def autocommit_engine() -> Engine:
    """Return this process's autocommit engine, rebuilt after a fork or an ORM reconfiguration."""
    global _cached
    owner = (os.getpid(), id(settings.engine))
    cached = _cached
    if cached is not None and cached[0] == owner:
        return cached[1]
    with _lock:
        if _cached is None or _cached[0] != owner:
            if _cached is not None and _cached[0][0] == owner[0]:
                _cached[1].dispose()
            # After a fork the parent's connections are left alone: they are the parent's.
            _cached = (owner, _build())
        return _cached[1]


def run_once_more_if_disconnected(work: Callable[[Connection], T]) -> T:
    """Run *work* on a pooled connection; if the connection was dead, once more on a fresh one."""
    engine = autocommit_engine()
    try:
        with engine.connect() as connection:
            return work(connection)
    except DBAPIError as error:
        if not error.connection_invalidated:
            raise
    with engine.connect() as connection:
        return work(connection)
