"""Turning redis-py's connection failures into an error a deployer can act on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions

_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#]*")


class RedisStateConnectionError(redis.exceptions.ConnectionError):
    """The Redis server holding Airflow state cannot be reached (a redis-py ``ConnectionError``)."""


def mask_url(url: str) -> str:
    """Return *url* with any password (in the userinfo or a ``password=`` query) replaced by ``***``."""
    # String surgery rather than urlsplit/urlunsplit: those rewrite `unix:///path` URLs, and an
    # unquoted '/' or '@' in a password must still not leak. Masking too much is the safe side.
    scheme, separator, rest = url.partition("://")
    if separator:
        cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
        userinfo, at, after = rest[:cut].rpartition("@")
        if at:
            # A lone userinfo (no ':') is often a password written without the ':'; hide it all.
            masked = userinfo.split(":", 1)[0] + ":***@" if ":" in userinfo else "***@"
            rest = masked + after + rest[cut:]
        url = f"{scheme}://{rest}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


@contextmanager
def reachable(url: str, source: str, layout: str = "") -> Iterator[None]:
    """Re-raise connection failures and timeouts as :class:`RedisStateConnectionError`."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        if isinstance(error, RedisStateConnectionError):
            raise
        # A URL built from a connection is fixed in that connection, not in the option.
        where = source if source.startswith("Airflow connection") else "[state_redis] url"
        if layout:
            where = f"{where} and {layout}"
        raise RedisStateConnectionError(
            f"Cannot reach the Redis server for Airflow state at {mask_url(url)} (from {source}"
            f"{'; ' + layout if layout else ''}): "
            # redis-py's message ends with a period already ("... Connection refused.").
            f"{str(error).rstrip('.')}. Check that the server is running and that {where} points at it "
            "(the option can also be set with AIRFLOW__STATE_REDIS__URL)."
        ) from error


class StateNotReplicatedError(redis.exceptions.RedisError):
    """
    Fewer replicas than ``[state_redis] wait_replicas`` acknowledged a write in time. The write stays
    (Redis cannot roll back); not a ``ConnectionError``, so no client retries it.
    """
