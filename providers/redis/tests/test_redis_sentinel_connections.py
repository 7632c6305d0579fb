"""
The Sentinel-managed connections of ``airflow_state_redis._sentinel_connections``, held against
redis-py itself: these tests fail, naming that module, on the first redis-py release that changes
what its classes rely on, or that reconnects to a promoted primary by itself (then they can go).

One primary, one replica and three sentinels of their own (about 5 s to start), and one failover
by the ``SENTINEL FAILOVER`` command: the old primary stays up, as a replica.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from airflow_state_redis._sentinel_connections import connection_class
from state_testing.redis_topologies import SentinelHandle, have_redis_topologies, redis_sentinel, wait_for

SHIM = "airflow_state_redis._sentinel_connections"


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelHandle]:
    if not have_redis_topologies():
        pytest.skip("redis-server and redis-cli are not installed (apt-get install redis-server)")
    with redis_sentinel(replicas=1) as handle:
        yield handle


@pytest.mark.parametrize(
    "base",
    [redis.sentinel.SentinelManagedConnection, redis.asyncio.sentinel.SentinelManagedConnection],
    ids=["sync", "asyncio"],
)
def test_what_the_connections_override_and_call_keeps_its_shape(base):
    send = inspect.signature(base.send_packed_command)
    assert list(send.parameters) == ["self", "command", "check_health"], (
        f"{SHIM}: {base.__module__}.{base.__name__}.send_packed_command now takes {send}"
    )
    assert send.parameters["check_health"].default is True, f"{SHIM}: send_packed_command{send}"
    connect = inspect.signature(base.connect)
    assert list(connect.parameters) == ["self"], f"{SHIM}: {base.__name__}.connect now takes {connect}"
    assert isinstance(inspect.getattr_static(base, "is_connected", None), property), (
        f"{SHIM}: {base.__name__}.is_connected is no longer a property"
    )


def _sentinel_addresses(handle: SentinelHandle) -> list[tuple[str, int]]:
    return [("127.0.0.1", s.port) for s in handle.sentinels]


def _fail_over(handle: SentinelHandle) -> tuple[int, int]:
    """Have the sentinels promote the replica; return (old primary's port, new primary's port)."""
    old = handle.primary().port

    def failover_started() -> bool:
        asking = handle.sentinels[0].client()
        try:
            asking.execute_command("SENTINEL", "FAILOVER", handle.service)
            return True
        except redis.exceptions.ResponseError as refused:
            # The sentinel learns of the replica, and that it is in sync, from the primary's INFO,
            # which it reads every few seconds: on a busy machine it may not have yet.
            if "NOGOODSLAVE" not in str(refused):
                raise
            return False
        finally:
            asking.close()

    wait_for(failover_started, 30, "a sentinel that finds the replica fit to promote")

    def every_sentinel_names_another() -> bool:
        for each in handle.sentinels:
            client = each.client()
            try:
                _host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", handle.service)
            finally:
                client.close()
            if int(port) == old:
                return False
        return True

    wait_for(every_sentinel_names_another, 30, "every sentinel naming the promoted replica")
    return old, handle.primary().port


def test_a_reconnect_to_send_asks_the_sentinels_and_redis_py_alone_does_not(sentinel):
    """
    A command that failed is retried on the same connection, which reconnects to send it. Ours ask
    the sentinels then and reach the promoted primary; redis-py's own reconnect to the address they
    had. Both, sync and asyncio, checked on connections made before one failover.
    """
    sentinels = _sentinel_addresses(sentinel)
    clients = []  # a connection holds its pool only weakly

    def sync_connection(ours: bool) -> redis.connection.AbstractConnection:
        chosen = {"connection_class": connection_class(sync=True, tls=False)} if ours else {}
        client = redis.sentinel.Sentinel(sentinels, socket_timeout=2, **chosen).master_for(sentinel.service)
        clients.append(client)
        return client.connection_pool.get_connection()

    async def async_connection(ours: bool) -> redis.asyncio.connection.AbstractConnection:
        chosen = {"connection_class": connection_class(sync=False, tls=False)} if ours else {}
        client = redis.asyncio.sentinel.Sentinel(sentinels, socket_timeout=2, **chosen).master_for(
            sentinel.service
        )
        clients.append(client)
        return await client.connection_pool.get_connection()

    async def reconnected_ports() -> tuple[int, dict[str, int]]:
        connections = {
            "ours, sync": sync_connection(ours=True),
            "redis-py's own, sync": sync_connection(ours=False),
            "ours, asyncio": await async_connection(ours=True),
            "redis-py's own, asyncio": await async_connection(ours=False),
        }
        old, _new = _fail_over(sentinel)
        for what, connection in connections.items():
            assert connection.port == old, what
            # What redis-py's client does when a command fails on a connection, before it retries.
            if inspect.iscoroutinefunction(connection.send_command):
                await connection.disconnect()
                await connection.send_command("PING")
                assert await connection.read_response() in (b"PONG", "PONG")
                await connection.disconnect()
            else:
                connection.disconnect()
                connection.send_command("PING")
                assert connection.read_response() in (b"PONG", "PONG")
                connection.disconnect()
        return old, {what: connection.port for what, connection in connections.items()}

    old, reached = asyncio.run(reconnected_ports())
    new = sentinel.primary().port
    assert new != old
    for mode in ("sync", "asyncio"):
        assert reached[f"ours, {mode}"] == new, (
            f"{SHIM} ({mode}): a connection reconnecting to send went to port {reached[f'ours, {mode}']}, "
            f"not to the promoted primary ({new}): redis-py no longer sends through send_packed_command, "
            "or connect() no longer asks the sentinels"
        )
        assert reached[f"redis-py's own, {mode}"] == old, (
            f"{SHIM} ({mode}): redis-py's own SentinelManagedConnection now reconnects to the promoted "
            "primary by itself (redis/redis-py#3874 fixed?): the classes there, and this test, can go"
        )
