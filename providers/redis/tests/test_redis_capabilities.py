"""
Versions, per-key expiry, increments and clean-up on Redis, beyond the shared kit: the stored
layout (old metadata still reads), the hash TTL never cutting a key short, clean-up racing a
writer, and contention between real processes.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow_shared.state import (
    API_WRITER,
    MAX_COUNTER,
    AssetScope,
    StateConflictError,
    StateEntry,
    StateWriter,
    TaskScope,
    VersionedValue,
)
from airflow_state_redis import RedisStateBackend, _meta, _scripts

UID = "42.1764504000123456"
TASK = TaskScope("dag", "run_1", "task", -1, UID)
ASSET = AssetScope(7)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def names(backend: RedisStateBackend, scope) -> list[str]:
    """Value hash, metadata hash and (task state) map-index set of *scope*."""
    found = backend._keys.names(scope)
    if isinstance(scope, TaskScope):
        found.append(backend._keys.task_index(scope))
    return found


def hours(n: float) -> datetime:
    return datetime.now(UTC) + timedelta(hours=n)


# --- stored layout ---------------------------------------------------------------------------


def test_metadata_of_an_older_build_reads_as_version_1_that_never_expires(make_backend, redis_client):
    backend = make_backend()
    value_hash, meta_hash, _ = names(backend, TASK)
    # Exactly what the previous build stored: "<micros>:<try>".
    redis_client.hset(value_hash, b"k", b'"old"')
    redis_client.hset(meta_hash, b"k", b"1764504000123456:2")

    assert backend.get_versioned(TASK, "k") == VersionedValue('"old"', 1)
    assert backend.entries(TASK).entries == [
        StateEntry("k", '"old"', EPOCH + timedelta(microseconds=1764504000123456), 2, 1, None, None)
    ]
    with pytest.raises(StateConflictError) as conflict:
        backend.write(TASK, "k", "x", if_version=2)
    assert conflict.value.stored == 1
    assert backend.write(TASK, "k", '"new"', if_version=1) == 2
    assert redis_client.hget(value_hash, b"k") == b'"new"'  # the value itself: stored as ever


def test_values_hash_is_unchanged_and_metadata_carries_version_expiry_and_writer(make_backend, redis_client):
    backend = make_backend()
    expires_at = datetime(2100, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    writer = StateWriter.task_try("etl", "manual__1", "load:x", 3, 2)
    backend.write(ASSET, "w", '{"a": 1}', writer=writer, expires_at=expires_at)
    backend.write(ASSET, "w", '{"a": 2}', writer=writer, expires_at=expires_at)
    backend.write(TASK, "t", "1", writer=writer)
    asset_values, asset_meta = names(backend, ASSET)
    task_values, task_meta, _ = names(backend, TASK)

    assert redis_client.hgetall(asset_values) == {b"w": b'{"a": 2}'}
    assert redis_client.hgetall(task_values) == {b"t": b"1"}
    _, no_try, version, expires, writer_json = redis_client.hget(asset_meta, b"w").split(b":", 4)
    assert (no_try, version) == (b"", b"2")
    assert EPOCH + timedelta(microseconds=int(expires)) == expires_at
    assert json.loads(writer_json) == ["task", "etl", "manual__1", "load:x", 3, 2]
    # Task state records the try, not the writer.
    assert redis_client.hget(task_meta, b"t").split(b":")[1:] == [b"2", b"1", b""]
    (entry,) = backend.entries(ASSET).entries
    assert (entry.version, entry.expires_at, entry.writer) == (2, expires_at, writer)
    assert entry.updated_by_try is None


def test_an_expired_key_stays_stored_until_cleanup_and_its_version_continues(make_backend, redis_client):
    backend = make_backend()
    value_hash = names(backend, TASK)[0]
    backend.write(TASK, "k", "1")
    backend.write(TASK, "k", "2", expires_at=hours(-1))
    assert backend.get(TASK, "k") is None
    assert redis_client.hget(value_hash, b"k") == b"2"  # invisible, not yet removed
    with pytest.raises(StateConflictError) as conflict:
        backend.write(TASK, "k", "3", if_version=2)
    assert conflict.value.stored == 0
    # Absent for if_version, yet the stored row's version goes on (2 + 1).
    assert backend.write(TASK, "k", "3", if_version=0) == 3


# --- the hash TTL never cuts a key short ------------------------------------------------------


def test_a_key_expiring_after_the_hash_ttl_extends_the_hashes(make_backend, redis_client):
    backend = make_backend(task_ttl_seconds=1000)
    backend.write(TASK, "long", "v", expires_at=hours(2))
    for name in names(backend, TASK):
        assert 7_190_000 < redis_client.pttl(name) <= 7_200_000
    # A later write with a shorter life (or none) never shortens it.
    backend.write(TASK, "short", "v", expires_at=hours(0.01))
    backend.set(TASK, "plain", "v")
    asyncio.run(backend.aincrement(TASK, "n"))
    for name in names(backend, TASK):
        assert redis_client.pttl(name) > 7_100_000
    # A key that expires before the hash TTL leaves the TTL as configured.
    other = TaskScope("dag", "run_1", "task", 5, UID)
    backend.write(other, "k", "v", expires_at=hours(0.01))
    assert 990_000 < redis_client.pttl(names(backend, other)[0]) <= 1_000_000


def test_a_hash_without_ttl_gets_one_long_enough_for_its_keys(make_backend, redis_client):
    # Written while the TTL was switched off: the hash has none, but its keys have an expiry.
    make_backend(task_ttl_seconds=None).write(TASK, "long", "v", expires_at=hours(3))
    value_hash = names(backend := make_backend(task_ttl_seconds=1000), TASK)[0]
    assert redis_client.pttl(value_hash) == -1
    backend.set(TASK, "other", "v")
    assert 3 * 3_600_000 - 20_000 < redis_client.pttl(value_hash) <= 3 * 3_600_000


def test_without_a_hash_ttl_expiring_keys_leave_the_hashes_permanent(make_backend, redis_client):
    backend = make_backend(asset_ttl_seconds=None)
    backend.write(ASSET, "k", "v", expires_at=hours(1))
    assert [redis_client.pttl(name) for name in names(backend, ASSET)] == [-1, -1]


# --- increment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "result"), [(" 007 ", 8), ("-0", 1), ("\t-12\n", -11), (str(MAX_COUNTER - 1), MAX_COUNTER)]
)
def test_increment_reads_integers_as_the_shared_helper_does(make_backend, stored, result):
    backend = make_backend()
    backend.set(TASK, "n", stored)
    assert backend.increment(TASK, "n") == result
    assert backend.get_versioned(TASK, "n") == VersionedValue(str(result), 2)


def test_a_refused_increment_leaves_the_stored_text_and_version_exactly(make_backend, redis_client):
    backend = make_backend()
    stored = f" 0{MAX_COUNTER} "  # readable (whitespace, a leading zero), but one more overflows
    backend.set(TASK, "n", stored)
    meta_before = redis_client.hget(names(backend, TASK)[1], b"n")
    with pytest.raises(ValueError, match="would leave the 64-bit range"):
        backend.increment(TASK, "n")
    assert backend.get_versioned(TASK, "n") == VersionedValue(stored, 1)
    assert redis_client.hget(names(backend, TASK)[1], b"n") == meta_before


def test_increment_records_the_writer_and_expiry(make_backend):
    backend = make_backend()
    expires_at = hours(1)
    assert backend.increment(ASSET, "n", 5, writer=API_WRITER, expires_at=expires_at) == 5
    (entry,) = backend.entries(ASSET).entries
    assert (entry.value, entry.version, entry.writer) == ("5", 1, API_WRITER)
    assert abs(entry.expires_at - expires_at) < timedelta(microseconds=1)


# --- cleanup -----------------------------------------------------------------------------------


def test_cleanup_keeps_a_key_written_again_after_it_was_picked(make_backend, monkeypatch):
    backend = make_backend()
    for key in ("a", "b", "c"):
        backend.write(TASK, key, "old", expires_at=hours(-1))
    real_hscan = backend._client.hscan_iter

    def hscan_then_rewrite(*args, **kwargs):
        yield from real_hscan(*args, **kwargs)  # every key picked as expired...
        backend.write(TASK, "b", "new")  # ...then "b" is written again before the delete

    monkeypatch.setattr(backend._client, "hscan_iter", hscan_then_rewrite)
    assert backend.cleanup(now=datetime.now(UTC)) == 2
    assert backend.get_versioned(TASK, "b") == VersionedValue("new", 2)
    assert backend.keys(TASK) == ["b"]


def test_cleanup_removes_emptied_hashes_with_their_metadata_and_map_index(make_backend, redis_client):
    backend = make_backend()
    gone, kept = TaskScope("dag", "run_1", "task", 0, UID), TaskScope("dag", "run_1", "task", 1, UID)
    backend.write(gone, "k", "v", expires_at=hours(-1))
    backend.write(kept, "k", "v")
    backend.write(ASSET, "k", "v", expires_at=hours(-1))
    assert backend.cleanup(now=datetime.now(UTC), dry_run=True) == 2
    assert redis_client.exists(*names(backend, gone)[:2]) == 2  # a dry run touches nothing
    assert backend.cleanup(now=datetime.now(UTC)) == 2
    assert redis_client.exists(*names(backend, gone)[:2], *names(backend, ASSET)) == 0
    assert redis_client.smembers(names(backend, kept)[2]) == {b"1"}
    # Clearing all map indexes after a clean-up still finds every hash left.
    backend.clear(kept, all_map_indices=True)
    assert backend.get(kept, "k") is None


def test_cleanup_by_age_spares_values_without_metadata_and_other_deployments(
    make_backend, redis_client, key_prefix
):
    backend = make_backend()
    value_hash = names(backend, TASK)[0]
    redis_client.hset(value_hash, b"ancient", b"1")  # from a build before the metadata: age unknown
    backend.set(TASK, "recent", "1")
    # A deployment whose prefix starts with ours, and a hand-made key of nearly our shape.
    neighbour = make_backend(key_prefix=f"{key_prefix}:task:x")
    neighbour.write(TASK, "k", "v", expires_at=hours(-1))
    redis_client.hset(f"{key_prefix}:task:{{odd}}:x:meta", b"k", b"1:1:1:1")

    later = datetime.now(UTC) + timedelta(seconds=1)
    assert backend.cleanup(now=later, updated_before=later) == 1
    assert backend.keys(TASK) == ["ancient"]
    assert redis_client.hget(neighbour._keys.names(TASK)[0], b"k") == b"v"
    assert redis_client.exists(f"{key_prefix}:task:{{odd}}:x:meta")


def test_cleanup_refuses_bad_arguments(make_backend):
    backend = make_backend()
    with pytest.raises(ValueError, match="timezone-aware"):
        backend.cleanup(now=datetime.now())
    with pytest.raises(TypeError, match="updated_before"):
        backend.cleanup(now=datetime.now(UTC), updated_before="yesterday")
    with pytest.raises(ValueError, match="batch_size"):
        backend.cleanup(now=datetime.now(UTC), batch_size=0)


# --- async twins are native --------------------------------------------------------------------


def test_async_capabilities_use_no_threads(make_backend, monkeypatch):
    backend = make_backend()

    def forbidden(*args, **kwargs):
        raise AssertionError("an async method fell back to a thread or to a sync method")

    monkeypatch.setattr(asyncio, "to_thread", forbidden)
    for name in ("get_versioned", "write", "increment"):
        monkeypatch.setattr(backend, name, forbidden)
    threads_before = threading.active_count()

    async def scenario() -> None:
        assert await backend.awrite(TASK, "k", "v", if_version=0) == 1
        assert await backend.aget_versioned(TASK, "k") == VersionedValue("v", 1)
        assert await backend.aincrement(TASK, "n", 3) == 3
        with pytest.raises(StateConflictError):
            await backend.awrite(TASK, "k", "v", if_version=0)

    asyncio.run(scenario())
    assert threading.active_count() == threads_before


# --- contention between processes --------------------------------------------------------------
# Each process has its own backend, connections and GIL: what a deployment's workers do.

PROCESSES = 4


def _backend(url: str, prefix: str) -> RedisStateBackend:
    return RedisStateBackend(url, key_prefix=prefix, task_ttl_seconds=3600, asset_ttl_seconds=None)


def _increment(url: str, prefix: str, times: int, start: Any) -> None:
    backend = _backend(url, prefix)
    start.wait()  # every process ready (imported, connected) before any increments
    for _ in range(times):
        backend.increment(ASSET, "counter")


def _append(url: str, prefix: str, worker: int, times: int, start: Any) -> None:
    backend = _backend(url, prefix)
    start.wait()
    for n in range(times):
        while True:  # read-modify-write, retried on conflict: what task_state.update() does
            stored = backend.get_versioned(TASK, "list")
            items = json.loads(stored.value) if stored else []
            expected = stored.version if stored else 0
            try:
                backend.write(TASK, "list", json.dumps([*items, f"{worker}-{n}"]), if_version=expected)
            except StateConflictError:
                continue
            break


def _race(url: str, prefix: str, worker: int, rounds: int, barrier: Any, wins: Any) -> None:
    backend = _backend(url, prefix)
    for round_ in range(rounds):
        barrier.wait()
        stored = backend.get_versioned(ASSET, "leader")
        expected = stored.version if stored else 0
        barrier.wait()  # everyone has read the same version before anyone writes
        try:
            backend.write(ASSET, "leader", str(worker), if_version=expected)
        except StateConflictError as conflict:
            assert conflict.stored == expected + 1
        else:
            wins.put((round_, worker))


def _run_all(target: Any, argsets: list[tuple[Any, ...]]) -> None:
    processes = [FORK.Process(target=target, args=args) for args in argsets]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * len(processes)


# Forked (a spawned interpreter takes seconds to start on a busy machine): each process builds a
# backend of its own, so no connection of the test process is shared.
FORK = multiprocessing.get_context("fork")


def test_processes_incrementing_one_counter_lose_nothing(redis_url, key_prefix, make_backend):
    times, start = 150, FORK.Barrier(PROCESSES)
    _run_all(_increment, [(redis_url, key_prefix, times, start)] * PROCESSES)
    total = PROCESSES * times
    assert make_backend().get_versioned(ASSET, "counter") == VersionedValue(str(total), total)


def test_processes_appending_with_compare_and_set_lose_nothing(redis_url, key_prefix, make_backend):
    times, start = 30, FORK.Barrier(PROCESSES)
    _run_all(_append, [(redis_url, key_prefix, worker, times, start) for worker in range(PROCESSES)])
    stored = make_backend().get_versioned(TASK, "list")
    items = json.loads(stored.value)
    assert sorted(items) == sorted(f"{w}-{n}" for w in range(PROCESSES) for n in range(times))
    assert stored.version == PROCESSES * times  # one successful write per element, no more
    for worker in range(PROCESSES):  # and each worker's elements in the order it appended them
        assert [i for i in items if i.startswith(f"{worker}-")] == [f"{worker}-{n}" for n in range(times)]


def test_processes_writing_if_version_exactly_one_wins_each_round(redis_url, key_prefix, make_backend):
    rounds = 25
    barrier, wins = FORK.Barrier(PROCESSES), FORK.Queue()
    _run_all(_race, [(redis_url, key_prefix, worker, rounds, barrier, wins) for worker in range(PROCESSES)])
    won = [wins.get(timeout=10) for _ in range(rounds)]
    assert wins.empty()
    assert sorted(round_ for round_, _ in won) == list(range(rounds))
    last_winner = max(won)[1]
    assert make_backend().get_versioned(ASSET, "leader") == VersionedValue(str(last_winner), rounds)


# --- Python and Lua read metadata alike ----------------------------------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        b"1764504000123456:2:7:1767096000123456",
        b"1764504000123456::3:",
        b'1764504000123456::3::["task","d:a:g","r",null,-1,2]',
        b"1764504000123456:2",  # an older build's
        b"1:2:3",
        b"1:2:3:4x",
        b"1:-:3:4",
        b"x:2:3:4",
        b"",
    ],
)
def test_reads_in_python_and_scripts_in_lua_parse_metadata_alike(redis_client, meta):
    # get() checks expiry in Python, writes and listings in Lua: they must agree on every text.
    lua = _scripts._META + ("local v, e = meta_of(ARGV[1])\nreturn {v, e and string.format('%d', e) or ''}")
    version, expires = redis_client.eval(lua, 0, meta)
    assert _meta.version_and_expiry(meta) == (int(version), int(expires) if expires else None)
