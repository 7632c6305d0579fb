"""
Declares ``[state_redis]`` to Airflow (entry point ``apache_airflow_provider``), so the options show
in ``airflow config list``. A plain dict: this distribution never imports Airflow.

Defaults are left empty here on purpose: the backend applies its own (see ``_config``), so it
behaves the same with or without Airflow installed.
"""

from __future__ import annotations

from typing import Any


def _option(
    description: str, example: str | None, type_: str = "string", sensitive: bool = False
) -> dict[str, Any]:
    option: dict[str, Any] = {
        "description": description,
        "version_added": "0.1.0",
        "type": type_,
        "example": example,
        "default": None,
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
                        "First part of every key (default airflow:state).", "airflow:state"
                    ),
                    "task_ttl_seconds": _option(
                        "Task state expires this long after its task instance's last write "
                        "(default 2592000, 30 days; 0 never).",
                        "2592000",
                        type_="integer",
                    ),
                    "asset_ttl_seconds": _option(
                        "Asset state expires this long after the asset's last write (default 0, never).",
                        "0",
                        type_="integer",
                    ),
                },
            }
        },
    }
