"""
A Redis server killed (SIGKILL) and started again under steady writes: with the persistence the
docs ask for (docs/redis.md) (``appendonly yes``, ``appendfsync always``), no acknowledged write is lost; the
client's retries ride through a short outage (without retries it is a clear
``RedisStateConnectionError``), and the backend heals without being rebuilt.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_shared.state import TaskScope
from airflow_state_redis import RedisStateBackend
from airflow_state_redis._config import DEFAULT_RETRIES, Topology
from airflow_state_redis._errors import RedisStateConnectionError
from state_testing.dbservers import REDIS_SERVER, free_port, have_redis_server, wait_for_redis

WRITERS = 4


class DurableRedis:
    """A redis-server that persists every write before answering, on a fixed port and directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        command += ["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]
        log_path = self.workdir / "redis.log"
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_for_redis(self.url, self.process, str(log_path))

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[DurableRedis]:
    if not have_redis_server():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = DurableRedis(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.mark.parametrize("retries", [0, DEFAULT_RETRIES], ids=["no-retries", "default-retries"])
def test_a_killed_server_loses_no_acknowledged_write_and_the_backend_heals(durable_redis, retries):
    backend = RedisStateBackend(
        durable_redis.url, key_prefix="crash", task_ttl_seconds=None, topology=Topology(retries=retries)
    )
    scope = TaskScope("crash_dag", "run_1", "writer", dag_run_uid="1.1")
    acknowledged: dict[str, str] = {}
    outcomes: list[tuple[float, float, BaseException | None]] = []
    stop = threading.Event()

    def write(writer: int) -> None:
        n = 0
        while not stop.is_set():
            key, value = f"w{writer}_{n % 20}", str(n)
            started = time.monotonic()
            try:
                backend.set(scope, key, value)
            except Exception as error:
                outcomes.append((started, time.monotonic(), error))
            else:
                acknowledged[key] = value
                outcomes.append((started, time.monotonic(), None))
            n += 1
            time.sleep(0.005)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    durable_redis.kill()
    time.sleep(1.0)
    durable_redis.start()
    back_at = time.monotonic()
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()

    failures = [error for _, _, error in outcomes if error is not None]
    if retries:
        # The client's retries (about 10 s of backoff) ride through a one-second outage.
        assert not failures, failures[:3]
        assert max(ended - started for started, ended, _ in outcomes) > 0.5, "no call waited"
    else:
        assert failures, "the server was killed, yet no call failed: the test did not test anything"
        assert all(isinstance(error, RedisStateConnectionError) for error in failures), failures[:3]
    late = [error for started, _, error in outcomes if error is not None and started > back_at]
    assert not late, f"{len(late)} calls made after the server was back failed: {late[:3]}"
    assert sum(1 for started, _, error in outcomes if started > back_at and error is None) > 10
    # Every acknowledged write is there: each key holds its last acknowledged value, or a later one
    # whose answer the crash swallowed (a failed call may have been applied; n only grows).
    for key, value in acknowledged.items():
        stored = backend.get(scope, key)
        assert stored is not None and int(stored) >= int(value), (key, value, stored)
    backend.close()
