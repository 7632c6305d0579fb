"""Fixtures for the Redis backend's tests: a real redis-server per run, and isolation from Airflow."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from airflow_state_redis import RedisStateBackend
from state_testing.dbservers import have_redis_server, redis_server

# Modules whose import would pull Airflow in; None in sys.modules makes `import` fail at once.
AIRFLOW_MODULES = ("airflow", "airflow.configuration", "airflow.sdk", "airflow.hooks", "airflow.hooks.base")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    if not have_redis_server():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with redis_server() as url:
        yield url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client, to look at what the backend stored."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _without_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    Run every test as if Airflow were not installed, and with no [state_redis] variables set.

    The distribution does not depend on Airflow, so its tests must not need it; this also keeps
    the machine's own configuration from leaking into the config-sourcing tests.
    """
    for name in AIRFLOW_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    for name in list(os.environ):
        if name.startswith("AIRFLOW__STATE_REDIS__"):
            monkeypatch.delenv(name)


@pytest.fixture
def key_prefix() -> str:
    """A prefix of its own per test, so tests sharing the server never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_backend(redis_url: str, key_prefix: str) -> Iterator[Callable[..., RedisStateBackend]]:
    """``make(**overrides) -> RedisStateBackend`` on the test server; every setting explicit."""
    created: list[RedisStateBackend] = []

    def make(**overrides: Any) -> RedisStateBackend:
        options: dict[str, Any] = {
            "url": redis_url,
            "key_prefix": key_prefix,
            "task_ttl_seconds": 3600,
            "asset_ttl_seconds": None,
        }
        options.update(overrides)
        backend = RedisStateBackend(options.pop("url"), **options)
        created.append(backend)
        return backend

    yield make
    for backend in created:
        backend.close()
