"""Fixtures for the Redis backend's tests: a real redis-server per run, and isolation from Airflow."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from airflow_shared.state import StagedCommit, StagedOp, StagedWrite, TaskScope
from airflow_shared.state.testing import in_threads
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


@pytest.fixture
def commits_from_threads(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """
    ``run(backend, node_client, monitor_client, ledgers)``: 25 commits in each ledger's thread at
    once, *backend* waiting for a replica, then check with MONITOR on the primary (*monitor_client*)
    that each commit's WAIT went out on the connection that ran its EXEC, as WAIT counts the writes
    of its own connection only: on every connection, EXECs and WAITs alternate. *node_client*
    (a ``redis.Redis``) holds the pool of the backend's connections to that primary. The ledgers
    share no key, so no EXEC is aborted (MONITOR shows one as any other, with no WAIT after it).
    """

    def run(
        backend: RedisStateBackend,
        node_client: redis.Redis,
        monitor_client: redis.Redis,
        ledgers: list[TaskScope],
    ) -> None:
        rounds = 25
        # Let other threads run each time a connection goes back to the pool: the GIL seldom lets
        # one in between two lines of Python, where a WAIT sent after the hand-back would meet it.
        pool = node_client.connection_pool
        release = pool.release
        monkeypatch.setattr(pool, "release", lambda connection: (release(connection), time.sleep(0.001)))

        def commits(thread: int) -> None:
            ledger = ledgers[thread]
            for n in range(rounds):
                write = StagedWrite(ledger, f"k{n % 3}", StagedOp.SET, str(n))
                assert backend.apply_commit(StagedCommit(uuid.uuid4().hex, ledger, (write,))) is True

        marker = f"end-of-commits-{uuid.uuid4().hex}"
        by_connection: dict[str, list[str]] = {}
        with monitor_client.monitor() as monitor:
            in_threads(len(ledgers), commits)
            node_client.echo(marker)
            while marker not in (event := monitor.next_command())["command"]:
                name = event["command"].split(" ", 1)[0].upper()
                if name in ("EXEC", "WAIT"):
                    address = f"{event['client_address']}:{event['client_port']}"
                    by_connection.setdefault(address, []).append(name)
        monitor_client.close()
        assert sum(names.count("WAIT") for names in by_connection.values()) == len(ledgers) * rounds
        mismatched = {
            address: names
            for address, names in by_connection.items()
            if names != ["EXEC", "WAIT"] * (len(names) // 2)
        }
        assert not mismatched, f"a WAIT on a connection that did not just run the EXEC: {mismatched}"

    return run
