"""
Declares ``[state_redis]`` to Airflow (entry point ``apache_airflow_provider``), so the options show
in ``airflow config list``. A plain dict: this distribution never imports Airflow.

The defaults shown are the backend's own (``_defaults``), imported rather than written twice: with
or without Airflow installed, an option left unset means the same value, and
``airflow config list --section state_redis --show-values`` shows it as ``[state]`` shows its own.
Options without a default (the URL, the connection, Sentinel's) stay unset.
"""

from __future__ import annotations

from typing import Any

from ._defaults import DEFAULT_KEY_PREFIX, DEFAULT_RETRIES, DEFAULT_TASK_TTL_SECONDS, DEFAULT_WAIT_TIMEOUT_MS


def _option(
    description: str,
    example: str | None,
    type_: str = "string",
    sensitive: bool = False,
    added: str = "0.1.0",
    default: object = None,
) -> dict[str, Any]:
    option: dict[str, Any] = {
        "description": description,
        "version_added": added,
        "type": type_,
        "example": example,
        # Airflow's config.yml writes defaults as text.
        "default": None if default is None else str(default),
    }
    if sensitive:
        option["sensitive"] = True
    return option


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-state-redis",
        "name": "Task State: Redis backend",
        "description": "Keeps Airflow task and asset state (AIP-103) in Redis.",
        "config": {
            "state_redis": {
                "description": "Settings of airflow_state_redis.RedisStateBackend ([state] backend).",
                "options": {
                    "url": _option(
                        "redis-py URL of the server (redis://, rediss:// or unix://). Required unless "
                        "redis_conn_id is set.",
                        "redis://:password@redis:6379/0",
                        sensitive=True,
                    ),
                    "redis_conn_id": _option(
                        "An Airflow connection to use when url is not set.", "redis_default"
                    ),
                    "key_prefix": _option(
                        "First part of every key.", "airflow:state", default=DEFAULT_KEY_PREFIX
                    ),
                    "task_ttl_seconds": _option(
                        "Task state expires this long after its task instance's last write "
                        "(2592000: 30 days; 0 never).",
                        "2592000",
                        type_="integer",
                        default=DEFAULT_TASK_TTL_SECONDS,
                    ),
                    "asset_ttl_seconds": _option(
                        "Asset state expires this long after the asset's last write (0: never).",
                        "0",
                        type_="integer",
                        default=0,
                    ),
                    "mode": _option(
                        "What url points at: standalone (one server, the default), cluster (any node "
                        "of a Redis Cluster; the others are discovered) or sentinel (the primary "
                        "named by sentinel_master, found through sentinels; url then only gives the "
                        "password, database and TLS).",
                        "cluster",
                        added="0.4.0",
                        default="standalone",
                    ),
                    "sentinel_master": _option(
                        "mode = sentinel: the service name the sentinels monitor.",
                        "mymaster",
                        added="0.4.0",
                    ),
                    "sentinels": _option(
                        "mode = sentinel: the sentinels as host:port separated by commas.",
                        "sentinel-1:26379,sentinel-2:26379,sentinel-3:26379",
                        added="0.4.0",
                    ),
                    "sentinel_username": _option(
                        "mode = sentinel: the username for the sentinels themselves, if they require one.",
                        "sentinel",
                        added="0.4.0",
                    ),
                    "sentinel_password": _option(
                        "mode = sentinel: the password of the sentinels themselves (the primary's "
                        "password goes in url or the connection).",
                        "secret",
                        sensitive=True,
                        added="0.4.0",
                    ),
                    "wait_replicas": _option(
                        "After every write, wait until this many replicas acknowledged it (Redis WAIT) "
                        "and fail the call if fewer did within wait_timeout_ms; the write then stays "
                        "on the primary. Default 0: a write is done when the primary has it, and is "
                        "lost if the primary fails before replicating it.",
                        "1",
                        type_="integer",
                        added="0.4.0",
                        default=0,
                    ),
                    "wait_timeout_ms": _option(
                        "How long a write waits for wait_replicas replicas, in milliseconds.",
                        "1000",
                        type_="integer",
                        added="0.4.0",
                        default=DEFAULT_WAIT_TIMEOUT_MS,
                    ),
                    "retries": _option(
                        "Attempts after the first on a connection error or timeout (and, on a cluster, "
                        "a moved slot), with exponential backoff from 0.1 s to 2 s; default 8, about "
                        "10 s, enough to ride through a failover. A write retried after a lost reply "
                        "is applied once (see the Redis backend's documentation, 'Failover').",
                        "8",
                        type_="integer",
                        added="0.4.0",
                        default=DEFAULT_RETRIES,
                    ),
                },
            }
        },
    }
