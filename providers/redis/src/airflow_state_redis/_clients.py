"""
Building the redis-py client for the configured layout: one server, a Cluster, or Sentinel. Every
client retries on a connection error or timeout (docs/redis.md, "Failover", says what that means).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.retry
import redis.sentinel
from airflow_shared.state.waiting import is_person_waiting
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff

from ._config import RedisSettings
from ._sentinel_connections import connection_class

_T = TypeVar("_T")

# Bounded so an unreachable host fails in seconds instead of hanging a task; a
# `?socket_connect_timeout=` in the URL takes precedence (redis-py lets URL options win).
CLIENT_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 5.0}

_BACKOFF_BASE_S = 0.1
_BACKOFF_CAP_S = 2.0
_RETRIED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


#: Retries when a person waits on the call (the `airflow state` CLI), whatever ``[state_redis] retries``
#: says: enough for a blip, not the ~10 s that carry a task through a failover unattended.
WAITED_ON_RETRIES = 2


def _backoff() -> ExponentialWithJitterBackoff:
    return ExponentialWithJitterBackoff(cap=_BACKOFF_CAP_S, base=_BACKOFF_BASE_S)


def _refused(error: BaseException) -> bool:
    """Whether nothing listens at the address: redis-py keeps the socket's error as the context."""
    cause = error.__cause__ or error.__context__
    return isinstance(cause, ConnectionRefusedError | FileNotFoundError)  # TCP port, Unix socket


class _Retry(redis.retry.Retry):
    """
    redis-py's retry, shorter when a person waits on the call (see ``airflow_shared.state.waiting``):
    a refused connection is reported at once (the server is not running; asking again in 2 s will not
    start it) and other failures are retried at most :data:`WAITED_ON_RETRIES` times. Tasks, which
    no one watches, keep every configured retry.
    """

    def call_with_retry(
        self,
        do: Callable[[], _T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T:
        if not is_person_waiting():
            return super().call_with_retry(do, fail, is_retryable, with_failure_count)
        failures = 0

        def retryable(error: Exception) -> bool:
            nonlocal failures
            if (is_retryable and not is_retryable(error)) or _refused(error):
                return False
            failures += 1
            return failures <= WAITED_ON_RETRIES

        return super().call_with_retry(do, fail, retryable, with_failure_count)

    def get_retries(self) -> int:
        # A Cluster client counts its attempts itself, from this number.
        retries = super().get_retries()
        return min(retries, WAITED_ON_RETRIES) if is_person_waiting() else retries


def _sentinel_kwargs(settings: RedisSettings, *, sync: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(kwargs of the primary's connections, kwargs of the sentinels' connections)``."""
    parsed = redis.connection.parse_url(settings.url)
    tls = settings.url.startswith("rediss://")
    # The sentinels say where the primary is: the URL only gives credentials, database and TLS.
    for name in ("host", "port", "connection_class"):
        parsed.pop(name, None)
    primary = {**CLIENT_OPTIONS, **parsed}
    sentinel: dict[str, Any] = {
        name: value for name, value in primary.items() if name.startswith(("ssl_", "socket_"))
    }
    if tls:
        # With rediss:// the sentinels are reached over TLS too, with the same certificates.
        primary["ssl"] = sentinel["ssl"] = True
    # redis-py picks its Sentinel connection class from "ssl"; ours close a gap in reconnecting.
    primary["connection_class"] = connection_class(sync=sync, tls=primary.pop("ssl", False))
    # One attempt per sentinel: discovery moves on to the next one, and the primary's connection
    # retries the whole discovery with backoff.
    sentinel["retry"] = (redis.retry.Retry if sync else redis.asyncio.retry.Retry)(NoBackoff(), 0)
    topology = settings.topology
    if topology.sentinel_username:
        sentinel["username"] = topology.sentinel_username
    if topology.sentinel_password:
        sentinel["password"] = topology.sentinel_password
    return primary, sentinel


def build_client(settings: RedisSettings, *, sync: bool) -> Any:
    """The sync or asyncio client for *settings*; no I/O (every client connects lazily)."""
    topology = settings.topology
    # The CLI, the one caller a person waits on, calls the sync client: only that one shortens its retries.
    retry_class = _Retry if sync else redis.asyncio.retry.Retry
    retry = retry_class(_backoff(), topology.retries, supported_errors=_RETRIED)
    if topology.mode == "cluster":
        cluster = redis.cluster.RedisCluster if sync else redis.asyncio.cluster.RedisCluster
        return cluster.from_url(settings.url, retry=retry, **CLIENT_OPTIONS)
    if topology.mode == "sentinel":
        primary, sentinel_kwargs = _sentinel_kwargs(settings, sync=sync)
        sentinel_class = redis.sentinel.Sentinel if sync else redis.asyncio.sentinel.Sentinel
        sentinel = sentinel_class(list(topology.sentinels), sentinel_kwargs=sentinel_kwargs, **primary)
        assert topology.sentinel_master is not None  # checked with the settings
        return sentinel.master_for(topology.sentinel_master, retry=retry)
    return (redis.Redis if sync else redis.asyncio.Redis).from_url(
        settings.url, retry=retry, **CLIENT_OPTIONS
    )
