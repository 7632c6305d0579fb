"""
Whether a person is waiting on the backend calls made now: the ``airflow state`` CLI says so around
each command. A backend may then report a server that refuses connections at once, and give up on
one that does not answer after fewer attempts than it makes for tasks, whose retries are there to
ride through a restart or a failover unattended. A contextvar, not a setting: it covers only the
calls made inside :func:`person_waiting`, never the API server's or a task's in the same process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_waiting: ContextVar[bool] = ContextVar("airflow_state_person_waiting", default=False)


@contextmanager
def person_waiting() -> Iterator[None]:
    """Mark the backend calls made inside as waited on by a person (the CLI's commands)."""
    token = _waiting.set(True)
    try:
        yield
    finally:
        _waiting.reset(token)


def is_person_waiting() -> bool:
    return _waiting.get()
