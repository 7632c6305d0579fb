"""
One connection held from a client's pool for a whole transaction, through redis-py's public API.

A commit WATCHes the keys it touches, reads them, sends MULTI, its scripts and EXEC, and then WAIT,
which counts only the writes of its own connection. redis-py's ``Pipeline`` hands its connection
back to the pool inside ``execute()``, before a WAIT could follow, so the commit talks to one
connection itself: taken with ``ConnectionPool.get_connection()``, given back with ``release()``,
each command sent with ``Connection.send_command()`` and answered by ``read_response()``.

No command is sent again on another connection, as the client's own retries would: after MULTI,
a command sent on a fresh connection would run at once, outside the transaction. A connection
that fails, or is left inside a transaction by an error, is disconnected before it goes back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.exceptions


class ConnectionLost(Exception):
    """The held connection broke: the command in flight (EXEC too) may or may not have run."""


class HeldConnection:
    """A pooled connection that only this caller uses until :func:`held_connection` gives it back."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.watching = False

    def call(self, *args: Any) -> Any:
        """Send one command, return its reply (an error reply raises ``ResponseError``)."""
        try:
            # No health-check PING first: inside MULTI it would be queued with the transaction.
            self._connection.send_command(*args, check_health=False)
            return self._connection.read_response()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            raise ConnectionLost(f"the connection broke during {args[0]}: {error}") from error

    def watch(self, *names: str) -> None:
        self.call("WATCH", *names)
        self.watching = True

    def transaction(self, commands: list[tuple[Any, ...]]) -> list[Any] | None:
        """
        MULTI, *commands*, EXEC: each command's reply, or ``None`` when a watched key changed and
        EXEC applied nothing. A command refused as it is queued raises, and nothing is applied.
        """
        self.call("MULTI")
        for command in commands:
            self.call(*command)
        replies = self.call("EXEC")
        self.watching = False  # EXEC ends every WATCH, whatever it applied
        return replies


@contextmanager
def held_connection(client: redis.Redis) -> Iterator[HeldConnection]:
    """
    A connection of *client*'s pool for the block. A failure to connect raises as it is (a
    ``ConnectionError``), one once connected as :class:`ConnectionLost`; a block that ends in an
    error disconnects the connection (its state on the server is unknown).
    """
    pool = client.connection_pool
    connection = pool.get_connection()
    held = HeldConnection(connection)
    try:
        yield held
        if held.watching:  # left without EXEC: the next user of the connection must not inherit it
            held.call("UNWATCH")
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
