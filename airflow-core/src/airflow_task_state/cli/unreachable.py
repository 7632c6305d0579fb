"""
A database or backend server that cannot be reached is the operator's to fix, not a bug: the
commands report it as one line naming what failed, where it was looked for and what to check,
instead of a driver's traceback. Any other exception keeps its traceback.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_shared.state.waiting import person_waiting
from sqlalchemy.exc import DBAPIError

from airflow_task_state import config
from airflow_task_state.airflow_db.engine import is_unavailable
from airflow_task_state.configured_backend import get_state_backend, unwrap_state_backend

#: What the standard library raises when a peer cannot be reached: refused, reset, timed out, a
#: host name that does not resolve, a Unix socket that is not there.
_SOCKET_ERRORS = (ConnectionError, TimeoutError, socket.gaierror)
#: Client libraries name their own connection failures so (redis-py, requests, httpx's base
#: classes): they need not derive from the standard library's.
_CONNECTION_ERROR_NAMES = frozenset({"ConnectionError", "TimeoutError"})


@contextmanager
def one_line_when_unreachable() -> Iterator[None]:
    """
    Run a command as a person waits on it (a backend may then give up on a dead server sooner, see
    ``airflow_shared.state.waiting``), and exit with one line when a server cannot be reached.
    """
    try:
        with person_waiting():
            yield
    except Exception as error:
        message = unreachable(error)
        if message is None:
            raise
        raise SystemExit(message) from None


def check_database() -> None:
    """Connect to the metadata database once: a ``DBAPIError`` when it cannot be reached."""
    from airflow import settings  # initialised by now: the CLI has parsed its arguments

    with settings.get_engine().connect():
        pass


def unreachable(error: BaseException) -> str | None:
    """The one-line report of *error* if it says a server cannot be reached, otherwise ``None``."""
    if isinstance(error, DBAPIError):
        return _database_unreachable(error) if is_unavailable(error) else None
    if not _is_connection_failure(error):
        return None
    reason = _first_line(error) or type(error).__name__
    if "check" not in reason.lower():  # the Redis backend's message already says what to check
        reason += ". Check that its server is running and that its settings point at it"
    return f"cannot reach the state backend {_backend_name()} ([state] backend): {reason}"


def _backend_name() -> str:
    """The configured backend's class, for people (not the metrics wrapper around it)."""
    try:
        return type(unwrap_state_backend(get_state_backend())).__name__
    except Exception:  # failed while being built: the path in [state] backend still names it
        return config.backend_path()


def _is_connection_failure(error: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _SOCKET_ERRORS) or any(
            cls.__name__ in _CONNECTION_ERROR_NAMES for cls in type(current).__mro__
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _database_unreachable(error: DBAPIError) -> str:
    from airflow import settings  # the engine Airflow built from [database] sql_alchemy_conn

    engine = settings.engine
    where = "" if engine is None else f" at {engine.url.render_as_string(hide_password=True)}"
    reason = _first_line(error.orig) if error.orig is not None else _first_line(error)
    return (
        f"cannot reach the metadata database{where}: {reason}. Check that the database server is "
        "running and that [database] sql_alchemy_conn points at it"
    )


def _first_line(error: BaseException) -> str:
    """The message's first line, without a closing period: drivers go on with statements and hints."""
    return (str(error).strip().splitlines() or [""])[0].strip().rstrip(".")
