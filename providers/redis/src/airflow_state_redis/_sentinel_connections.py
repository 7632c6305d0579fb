"""
Sentinel-managed connections that ask the sentinels where the primary is whenever they reconnect
to send a command: the one place the provider leans on how redis-py works inside.

redis-py's ``SentinelManagedConnection`` asks the sentinels only in ``connect()``. When a command
fails and the client retries it on the same connection, ``send_packed_command`` reconnects through
``connect_check_health()`` to the address it had: a command in flight when the primary died was
retried against the dead primary (or a demoted one) although a replica had been promoted, until
the retries ran out (redis/redis-py#3874, open). redis-py offers no hook that runs before that
reconnect (``retry`` and ``register_connect_callback`` run around it, not in its place), so these
classes override the public ``send_packed_command`` to connect through ``connect()`` first, when
the connection is closed (the public ``is_connected``).

Written against redis-py 8.1.0. ``providers/redis/tests/test_redis_sentinel_connections.py`` fails,
naming these classes, when a release changes what they rely on: the signatures of
``send_packed_command`` and ``connect``, that sending a command goes through
``send_packed_command``, that ``connect()`` asks the sentinels; and when redis-py's own class
reconnects to the new primary by itself, so that these can go.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel

__all__ = ["connection_class"]


class _SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels again when it reconnects to send."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            self.connect()
        super().send_packed_command(command, check_health)


class _SentinelSSLConnection(_SentinelConnection, redis.connection.SSLConnection):
    """:class:`_SentinelConnection` over TLS (as redis-py's ``SentinelManagedSSLConnection``)."""


class _AsyncSentinelConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """:class:`_SentinelConnection` for asyncio (redis-py's async connection has the same gap)."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            await self.connect()
        await super().send_packed_command(command, check_health)


class _AsyncSentinelSSLConnection(_AsyncSentinelConnection, redis.asyncio.connection.SSLConnection):
    """:class:`_AsyncSentinelConnection` over TLS."""


def connection_class(*, sync: bool, tls: bool) -> type:
    """The connection class of a Sentinel-managed primary: sync or asyncio, plain or over TLS."""
    if sync:
        return _SentinelSSLConnection if tls else _SentinelConnection
    return _AsyncSentinelSSLConnection if tls else _AsyncSentinelConnection
