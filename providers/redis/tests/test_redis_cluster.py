"""
The Redis backend on a real Redis Cluster (3 primaries, 3 replicas): the whole conformance kit,
the calls that touch many hashes, and a failover in the middle of a stream of writes.

One cluster for the module (about 7 s to start); the failover test kills a node, so it runs last.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from airflow_shared.state import AssetScope, TaskScope
from airflow_shared.state.testing import StateBackendConformance
from airflow_state_redis import RedisStateBackend
from airflow_state_redis._config import Topology
from airflow_state_redis._errors import RedisStateConnectionError, StateNotReplicatedError
from state_testing.redis_topologies import (
    ClusterHandle,
    WriteStream,
    have_redis_topologies,
    redis_cluster,
    wait_for,
)

CLUSTER = Topology(mode="cluster")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterHandle]:
    if not have_redis_topologies():
        pytest.skip("redis-server and redis-cli are not installed (apt-get install redis-server)")
    with redis_cluster() as handle:
        yield handle


@pytest.fixture
def make_cluster_backend(make_backend, cluster):
    """``make(**overrides)``: conftest's ``make_backend`` pointed at the cluster."""
    return lambda **overrides: make_backend(**{"url": cluster.url, "topology": CLUSTER, **overrides})


class TestRedisClusterConformance(StateBackendConformance):
    commits_span_scopes = False  # a transaction spans one hash slot
    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self, make_cluster_backend):
        return make_cluster_backend()


class TestRedisClusterConformanceWaitingForReplicas(StateBackendConformance):
    commits_span_scopes = False
    """Every write followed by WAIT on the slot's primary: the same contract still holds."""

    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self, make_cluster_backend):
        return make_cluster_backend(topology=Topology(mode="cluster", wait_replicas=1))


def _scopes_on_every_primary(backend: RedisStateBackend, cluster: ClusterHandle) -> list[TaskScope]:
    """Task scopes whose hashes live on at least two different primaries."""
    scopes, primaries = [], set()
    for i in range(60):
        scope = TaskScope("dag", f"run_{i}", "task", dag_run_uid=f"{i}.1")
        scopes.append(scope)
        primaries.add(cluster.primary_of(backend._keys.task_hash(scope)).port)
    assert len(primaries) == 3, "the scopes should spread over every primary"
    return scopes


def test_key_counts_and_cleanup_reach_every_primary(make_cluster_backend, cluster):
    from datetime import UTC, datetime, timedelta

    backend = make_cluster_backend()
    scopes = _scopes_on_every_primary(backend, cluster)
    # Expiries far from now either way: a slow machine must not expire a key before it is counted.
    later, earlier = datetime.now(UTC) + timedelta(hours=1), datetime.now(UTC) - timedelta(seconds=1)
    for n, scope in enumerate(scopes):
        backend.set_many(scope, {f"k{j}": "v" for j in range(n % 3 + 1)})
        backend.write(scope, "fleeting", "x", expires_at=later)
    assert backend.key_counts(scopes) == [n % 3 + 2 for n in range(len(scopes))]
    for scope in scopes:
        backend.write(scope, "fleeting", "x", expires_at=earlier)  # expired at once, still stored
    assert backend.key_counts(scopes) == [n % 3 + 1 for n in range(len(scopes))]
    # The expired keys of every primary are found (SCAN of each) and removed.
    assert backend.cleanup(now=datetime.now(UTC)) == len(scopes)
    assert backend.cleanup(now=datetime.now(UTC)) == 0
    assert backend.get_many(scopes[0], ["k0", "fleeting"]) == {"k0": "v"}


def test_clearing_every_map_index_stays_in_the_task_slot(make_cluster_backend):
    backend = make_cluster_backend()
    mapped = [TaskScope("dag", "run", "mapped", map_index=i, dag_run_uid="1.1") for i in range(5)]
    other = TaskScope("dag", "run", "other", dag_run_uid="1.1")
    for scope in [*mapped, other]:
        backend.set(scope, "k", "v")
    backend.clear(mapped[0], all_map_indices=True)
    assert backend.key_counts([*mapped, other]) == [0, 0, 0, 0, 0, 1]
    asset = AssetScope(7)
    backend.set_many(asset, {"a": "1", "b": "2"})
    backend.delete_many(asset, ["a"])
    assert backend.get_many(asset, ["a", "b"]) == {"b": "2"}


def test_concurrent_first_async_calls_on_a_new_backend_all_succeed(make_cluster_backend):
    # redis-py's async cluster client, used by several coroutines before it has loaded the slot
    # map, failed about one time in 30 ('NoneType' object has no attribute 'writelines'): the
    # backend now loads it once first. Many fresh backends, so the race had its chances.
    for n in range(40):
        backend = make_cluster_backend()
        scopes = [TaskScope("dag", f"run_{n}", "task", map_index=i, dag_run_uid="1.1") for i in range(5)]

        async def first_calls(backend=backend, scopes=scopes):
            await asyncio.gather(*(backend.aset(s, "k", f"v{s.map_index}") for s in scopes))
            return await asyncio.gather(*(backend.aget(s, "k") for s in scopes))

        assert asyncio.run(first_calls()) == [f"v{i}" for i in range(5)]


def test_a_commit_waits_on_the_connection_that_ran_it(make_cluster_backend, cluster, commits_from_threads):
    backend = make_cluster_backend(topology=Topology(mode="cluster", wait_replicas=1, wait_timeout_ms=2000))
    # Tasks whose slots one primary serves: every commit goes through that node's pool.
    client = backend._client
    tasks = [TaskScope("waitfix", "run", f"task{n}", dag_run_uid="1.1") for n in range(60)]
    node = client.get_node_from_key(backend._keys.task_hash(tasks[0]))
    ledgers = [task for task in tasks if client.get_node_from_key(backend._keys.task_hash(task)) == node][:8]
    primary = cluster.primary_of(backend._keys.task_hash(ledgers[0]))
    commits_from_threads(backend, client.get_redis_connection(node), primary.client(), ledgers)


def test_the_slot_map_follows_a_failover_and_no_acknowledged_write_is_lost(make_cluster_backend, cluster):
    """
    SIGKILL the primary of a task's slot under a stream of writes: the client rides through the
    failover (retries, reloaded slot map), and every write it reported done is there afterwards.

    With wait_replicas=1 "done" means a replica had it, so the promoted replica holds it. The
    promoted replica has no replica of its own until the killed node comes back (it rejoins as a
    replica): writes in between are applied but refused with StateNotReplicatedError, as they must.
    """
    backend = make_cluster_backend(
        topology=Topology(mode="cluster", wait_replicas=1, wait_timeout_ms=300, retries=10)
    )
    scope = TaskScope("failover", "run", "writer", dag_run_uid="1.1")
    victim = cluster.primary_of(backend._keys.task_hash(scope))
    stream = WriteStream(backend, scope)
    thread = threading.Thread(target=stream.run)
    thread.start()
    try:
        wait_for(lambda: stream.successes_after(0) >= 20, 5, "writes before the failover")
        killed_at = time.monotonic()
        victim.kill()
        wait_for(lambda: cluster.primary_of(backend._keys.task_hash(scope)) is not victim, 10, "promotion")
        promoted_at = time.monotonic()
        victim.start()  # comes back as a replica of the promoted node
        wait_for(lambda: stream.successes_after(promoted_at + 0.5) >= 20, 10, "writes after the failover")
    finally:
        stream.stop.set()
        thread.join()
    cluster.wait_healthy()
    assert not stream.missing(), stream.missing()
    # Every error is one a caller can act on: unreachable (retries exhausted) or not replicated.
    assert all(isinstance(e, (RedisStateConnectionError, StateNotReplicatedError)) for e in stream.errors())
    assert max(ended - started for started, ended, _ in stream.calls) < 15
    print(
        f"failover: promoted {promoted_at - killed_at:.1f}s after the kill; "
        f"{len(stream.calls)} calls, refused: {Counter(type(e).__name__ for e in stream.errors())}"
    )


def test_a_cluster_url_to_no_server_is_a_clear_error():
    backend = RedisStateBackend(
        "redis://:secret@127.0.0.1:1", key_prefix="x", topology=Topology(mode="cluster", retries=0)
    )
    with pytest.raises((RedisStateConnectionError, redis.exceptions.RedisClusterException)) as caught:
        backend.get(TaskScope("d", "r", "t", dag_run_uid="1.1"), "k")
    assert "secret" not in str(caught.value)
