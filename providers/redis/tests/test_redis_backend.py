"""What the Redis backend does beyond the shared contract: layout, expiry, clearing, async, errors."""

from __future__ import annotations

import ast
import asyncio
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import airflow_state_redis.backend
import pytest
import redis.connection
from airflow_shared.state import (
    CLI_WRITER,
    AssetScope,
    BaseStateBackend,
    StagedCommit,
    StagedOp,
    StagedWrite,
    StateEntry,
    StateEntryPage,
    TaskScope,
    VersionedValue,
)
from airflow_state_redis import RedisStateBackend, RedisStateConnectionError
from airflow_state_redis._config import Topology
from redis.crc import key_slot
from state_testing.dbservers import free_port

# What airflow_task_state.airflow_db.run_identity.dag_run_uid builds: the dag_run id and its creation instant.
UID = "42.1764504000123456"
TASK = TaskScope("dag", "run_1", "task", -1, UID)


def task_hash(prefix: str, dag: str, run: str, task: str, map_index: int, uid: str = UID) -> str:
    return f"{prefix}:task:{{{dag}:{run}:{uid}:{task}}}:{map_index}"


def task_index(prefix: str, dag: str, run: str, task: str, uid: str = UID) -> str:
    return f"{prefix}:task:{{{dag}:{run}:{uid}:{task}}}:map-indexes"


def task_meta(prefix: str, dag: str, run: str, task: str, map_index: int, uid: str = UID) -> str:
    return task_hash(prefix, dag, run, task, map_index, uid) + ":meta"


def asset_meta(prefix: str, asset_id: int) -> str:
    return f"{prefix}:asset-meta:{{{prefix}:asset:{asset_id}}}"


def keys_under(client, prefix: str) -> set[str]:
    """The state keys under *prefix*, without the short-lived call markers (see call_markers)."""
    return all_keys_under(client, prefix) - call_markers(client, prefix)


def all_keys_under(client, prefix: str) -> set[str]:
    # SCAN is fine in a test on a private server; the backend itself never scans.
    return {key.decode() for key in client.scan_iter(match=f"{prefix}:*", count=1000)}


def call_markers(client, prefix: str) -> set[str]:
    """The keys that make a retried write apply once: ``…:op:<32 hex>``, each expiring by itself."""
    marker = re.compile(r"(:op:|:asset-op:\{[^{}]*\}:)[0-9a-f]{32}$")
    return {key for key in all_keys_under(client, prefix) if marker.search(key)}


# --- layout --------------------------------------------------------------------------------


def test_key_layout_is_one_hash_per_task_instance_plus_an_index(make_backend, redis_client, key_prefix):
    backend = make_backend()
    backend.set_by_try(
        TaskScope("dag", "manual__2026-01-01T00:00:00+00:00", "task", 2, dag_run_uid=UID),
        "k",
        "v",
        try_number=3,
    )
    backend.set(AssetScope(7), "watermark", "w")

    run = "manual__2026-01-01T00%3A00%3A00%2B00%3A00"
    assert keys_under(redis_client, key_prefix) == {
        task_hash(key_prefix, "dag", run, "task", 2),
        task_meta(key_prefix, "dag", run, "task", 2),
        task_index(key_prefix, "dag", run, "task"),
        f"{key_prefix}:asset:7",
        asset_meta(key_prefix, 7),
    }
    assert redis_client.type(task_hash(key_prefix, "dag", run, "task", 2)) == b"hash"
    assert redis_client.smembers(task_index(key_prefix, "dag", run, "task")) == {b"2"}
    # The values are stored as before; when and by which try sit in a sibling hash, same fields.
    assert redis_client.hgetall(task_hash(key_prefix, "dag", run, "task", 2)) == {b"k": b"v"}
    assert redis_client.hgetall(f"{key_prefix}:asset:7") == {b"watermark": b"w"}
    (task_written,) = redis_client.hgetall(task_meta(key_prefix, "dag", run, "task", 2)).items()
    (asset_written,) = redis_client.hgetall(asset_meta(key_prefix, 7)).items()
    now = time.time_ns() // 1000
    # "<micros>:<try>:<version>:<expires micros, empty: never>"; asset state records no try.
    assert task_written[0] == b"k" and task_written[1].split(b":")[1:] == [b"3", b"1", b""]
    assert asset_written[0] == b"watermark" and asset_written[1].split(b":")[1:] == [b"", b"1", b""]
    for meta in (task_written[1], asset_written[1]):
        assert now - 60_000_000 < int(meta.split(b":")[0]) <= now


def test_each_value_and_its_metadata_share_a_cluster_slot(make_backend, redis_client, key_prefix):
    # Redis Cluster refuses a MULTI or a script spanning slots. key_slot is redis-py's own
    # implementation of the cluster's hashing (CRC16 of the first non-empty {...}, else the name).
    backend = make_backend()
    backend.set(AssetScope(7), "k", "v")
    for map_index in (-1, 3):
        backend.set(TaskScope("dag", "run_1", "task", map_index, dag_run_uid=UID), "k", "v")
    names = keys_under(redis_client, key_prefix)
    asset_names = {f"{key_prefix}:asset:7", asset_meta(key_prefix, 7)}
    assert asset_names <= names
    assert len({key_slot(name.encode()) for name in asset_names}) == 1
    task_names = names - asset_names
    assert len(task_names) == 5  # two value hashes, two metadata hashes, the index set
    assert len({key_slot(name.encode()) for name in task_names}) == 1
    # The asset's tag is its own hash name, not a constant that would pile every asset on one slot.
    assert key_slot(b"p:asset-meta:{p:asset:7}") == key_slot(b"p:asset:7") != key_slot(b"p:asset:8")


def test_values_are_stored_as_utf8(make_backend, redis_client, key_prefix):
    make_backend().set(TASK, "clé", "naïve ☃ \U0001f680")
    stored = redis_client.hget(task_hash(key_prefix, "dag", "run_1", "task", -1), "clé".encode())
    assert stored == "naïve ☃ \U0001f680".encode()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (TaskScope("a:b", "c", "t", dag_run_uid=UID), TaskScope("a", "b:c", "t", dag_run_uid=UID)),
        (TaskScope("d", "r:x", "t", dag_run_uid=UID), TaskScope("d", "r", "x:t", dag_run_uid=UID)),
        (TaskScope("d", "r", "t:1", -1, dag_run_uid=UID), TaskScope("d", "r", "t", 1, dag_run_uid=UID)),
        (TaskScope("a%3Ab", "c", "t", dag_run_uid=UID), TaskScope("a:b", "c", "t", dag_run_uid=UID)),
        (TaskScope("d", "r}", "{t", dag_run_uid=UID), TaskScope("d", "r", "t", dag_run_uid=UID)),
        (TaskScope("d", "r:u", "t", dag_run_uid="1"), TaskScope("d", "r", "t", dag_run_uid="u:1")),
        (TaskScope("d", "r", "x:t", dag_run_uid="u"), TaskScope("d", "r", "t", dag_run_uid="u:x")),
        (TaskScope("d", "r", "t", dag_run_uid="u}"), TaskScope("d", "r", "t", dag_run_uid="u%7D")),
    ],
    ids=["dag-run", "run-task", "task-map-index", "percent", "braces", "run-uid", "uid-task", "uid-brace"],
)
def test_ids_containing_separators_do_not_collide(make_backend, first, second):
    backend = make_backend()
    backend.set(first, "k", "first")
    backend.set(second, "k", "second")
    assert backend.get(first, "k") == "first"
    assert backend.get(second, "k") == "second"

    backend.clear(first, all_map_indices=True)
    assert backend.get(first, "k") is None
    assert backend.get(second, "k") == "second"


def test_each_incarnation_of_a_run_has_keys_of_its_own(make_backend, redis_client, key_prefix):
    backend = make_backend(task_ttl_seconds=1000)
    deleted = TaskScope("dag", "run_1", "task", 0, dag_run_uid="42.1764504000123456")
    # SQLite hands the deleted row's id to the next insert; the creation instant still differs.
    recreated = TaskScope("dag", "run_1", "task", 0, dag_run_uid="42.1764504999000001")
    backend.set(deleted, "remote_job_id", "app_001")
    backend.set(recreated, "remote_job_id", "app_002")

    old_hash = task_hash(key_prefix, "dag", "run_1", "task", 0, uid="42.1764504000123456")
    new_hash = task_hash(key_prefix, "dag", "run_1", "task", 0, uid="42.1764504999000001")
    assert redis_client.hget(old_hash, b"remote_job_id") == b"app_001"
    assert redis_client.hget(new_hash, b"remote_job_id") == b"app_002"

    backend.clear(recreated, all_map_indices=True)
    assert not redis_client.exists(new_hash)
    # Nobody deletes the old incarnation's keys: they go with their TTL.
    assert 0 < redis_client.ttl(old_hash) <= 1000
    assert redis_client.ttl(task_index(key_prefix, "dag", "run_1", "task", uid="42.1764504000123456")) > 0


def test_prefixes_keep_deployments_apart(make_backend):
    one, two = make_backend(key_prefix="tenant-one"), make_backend(key_prefix="tenant-two")
    one.set(TASK, "k", "one")
    assert two.get(TASK, "k") is None
    two.clear(TASK, all_map_indices=True)
    assert one.get(TASK, "k") == "one"
    one.clear(TASK, all_map_indices=True)


# --- expiry --------------------------------------------------------------------------------


def test_task_state_gets_the_ttl_and_every_write_refreshes_it(make_backend, redis_client, key_prefix):
    backend = make_backend(task_ttl_seconds=1000)
    scope = TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID)
    names = (task_hash(key_prefix, "dag", "run_1", "task", 0), task_index(key_prefix, "dag", "run_1", "task"))

    backend.set(scope, "a", "1")
    for name in names:
        assert 990_000 < redis_client.pttl(name) <= 1_000_000

    for name in names:
        redis_client.expire(name, 5)
    backend.set(scope, "b", "2")
    for name in names:
        assert redis_client.ttl(name) > 990


def test_writing_one_map_index_keeps_the_index_set_alive_for_all(make_backend, redis_client, key_prefix):
    backend = make_backend(task_ttl_seconds=1000)
    backend.set(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID), "k", "v")
    index = task_index(key_prefix, "dag", "run_1", "task")
    redis_client.expire(index, 5)
    backend.set(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "k", "v")
    assert redis_client.ttl(index) > 990


def test_task_state_really_expires(make_backend):
    backend = make_backend(task_ttl_seconds=1)
    backend.set(TASK, "k", "v")
    time.sleep(1.3)
    assert backend.get(TASK, "k") is None


def test_asset_state_does_not_expire_by_default(make_backend, redis_client, key_prefix):
    make_backend(asset_ttl_seconds=None).set(AssetScope(1), "k", "v")
    assert redis_client.ttl(f"{key_prefix}:asset:1") == -1


def test_asset_ttl_applies_when_configured(make_backend, redis_client, key_prefix):
    make_backend(asset_ttl_seconds=600).set(AssetScope(1), "k", "v")
    assert 590 < redis_client.ttl(f"{key_prefix}:asset:1") <= 600


def test_switching_expiry_off_makes_rewritten_keys_permanent(make_backend, redis_client, key_prefix):
    make_backend(task_ttl_seconds=600).set(TASK, "k", "v")
    make_backend(task_ttl_seconds=0).set(TASK, "k", "v2")
    assert redis_client.ttl(task_hash(key_prefix, "dag", "run_1", "task", -1)) == -1
    assert redis_client.ttl(task_index(key_prefix, "dag", "run_1", "task")) == -1


# --- delete and clear ----------------------------------------------------------------------


def test_deleting_the_last_key_forgets_the_map_index(make_backend, redis_client, key_prefix):
    backend = make_backend()
    backend.set(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID), "a", "1")
    backend.set(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "a", "1")
    backend.set(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "b", "2")
    index = task_index(key_prefix, "dag", "run_1", "task")

    backend.delete(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "a")
    assert redis_client.smembers(index) == {b"0", b"1"}  # map index 1 still has "b"
    backend.delete(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "b")
    assert redis_client.smembers(index) == {b"0"}
    assert not redis_client.exists(task_hash(key_prefix, "dag", "run_1", "task", 1))


def test_clearing_one_map_index_leaves_the_rest(make_backend, redis_client, key_prefix):
    backend = make_backend()
    for map_index in (0, 1):
        backend.set(TaskScope("dag", "run_1", "task", map_index, dag_run_uid=UID), "k", "v")
    backend.clear(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID))
    assert redis_client.smembers(task_index(key_prefix, "dag", "run_1", "task")) == {b"1"}
    assert redis_client.exists(task_hash(key_prefix, "dag", "run_1", "task", 1))


def test_clearing_all_map_indexes_removes_exactly_that_task_of_that_run(
    make_backend, redis_client, key_prefix
):
    backend = make_backend()
    for map_index in (-1, 0, 5):
        backend.set(TaskScope("dag", "run_1", "task", map_index, dag_run_uid=UID), "k", "v")
    backend.set(TaskScope("dag", "run_2", "task", 0, dag_run_uid=UID), "k", "other run")
    backend.set(TaskScope("dag", "run_1", "task_b", 0, dag_run_uid=UID), "k", "other task")
    backend.set(TaskScope("dag_b", "run_1", "task", 0, dag_run_uid=UID), "k", "other dag")

    backend.clear(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID), all_map_indices=True)

    assert keys_under(redis_client, key_prefix) == {
        task_hash(key_prefix, "dag", "run_2", "task", 0),
        task_meta(key_prefix, "dag", "run_2", "task", 0),
        task_index(key_prefix, "dag", "run_2", "task"),
        task_hash(key_prefix, "dag", "run_1", "task_b", 0),
        task_meta(key_prefix, "dag", "run_1", "task_b", 0),
        task_index(key_prefix, "dag", "run_1", "task_b"),
        task_hash(key_prefix, "dag_b", "run_1", "task", 0),
        task_meta(key_prefix, "dag_b", "run_1", "task", 0),
        task_index(key_prefix, "dag_b", "run_1", "task"),
    }


def test_clearing_all_copes_with_an_already_expired_hash(make_backend, redis_client, key_prefix):
    backend = make_backend()
    backend.set(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID), "k", "v")
    backend.set(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), "k", "v")
    redis_client.delete(task_hash(key_prefix, "dag", "run_1", "task", 0))  # as if it had expired
    backend.clear(TASK, all_map_indices=True)
    assert keys_under(redis_client, key_prefix) == set()


def test_clearing_never_scans_the_keyspace(make_backend, redis_client):
    backend = make_backend()
    for map_index in range(3):
        backend.set(TaskScope("dag", "run_1", "task", map_index, dag_run_uid=UID), "k", "v")
    backend.set(AssetScope(1), "k", "v")
    redis_client.config_resetstat()

    backend.clear(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID))
    backend.clear(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), all_map_indices=True)
    asyncio.run(backend.aclear(TaskScope("dag", "run_1", "task", 1, dag_run_uid=UID), all_map_indices=True))
    backend.clear(AssetScope(1))

    # Commands run inside Lua scripts are counted too, so this also covers the scripts.
    stats = redis_client.info("commandstats")
    assert "cmdstat_del" in stats and "cmdstat_smembers" in stats  # the stats do see the clears
    assert not {"cmdstat_scan", "cmdstat_keys", "cmdstat_sscan", "cmdstat_hscan"} & set(stats)


# --- discarding what a cleared try wrote -----------------------------------------------------


def test_discarding_a_cleared_trys_keys_is_one_script(make_backend, redis_client):
    backend = make_backend()
    for try_number in (1, 2, 3):
        backend.set_by_try(TASK, f"by_try_{try_number}", "v", try_number=try_number)
    backend.set(TASK, "by_an_operator", "v")
    redis_client.config_resetstat()
    assert backend.discard_written_through_try(TASK, 2) == 2
    stats = redis_client.info("commandstats")
    # The metadata is read and the fields deleted inside one script (one step, so atomic): no
    # listing from the client, no value read.
    assert stats["cmdstat_hgetall"]["calls"] == 1
    assert stats["cmdstat_hdel"]["calls"] == 4  # two fields, each in the values and the metadata
    assert not {"cmdstat_hkeys", "cmdstat_hmget", "cmdstat_multi"} & set(stats)
    assert backend.keys(TASK) == ["by_an_operator", "by_try_3"]


def test_a_newer_try_writing_during_a_discard_keeps_its_write(make_backend):
    """Listing, then deleting (the contract's default) loses the write when it lands in between."""
    backend = make_backend()

    def discard(start: threading.Barrier) -> None:
        start.wait()
        backend.discard_written_through_try(TASK, 1)

    def write(start: threading.Barrier) -> None:
        start.wait()
        backend.set_by_try(TASK, "remote_job_id", "the new try's job", try_number=2)

    # The old path lost the write in about 1.5% of rounds here: 300 rounds catch it nearly always.
    for _ in range(300):
        backend.set_by_try(TASK, "remote_job_id", "the cleared try's job", try_number=1)
        start = threading.Barrier(2)
        threads = [threading.Thread(target=step, args=(start,)) for step in (discard, write)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert backend.get(TASK, "remote_job_id") == "the new try's job"


# --- write metadata: when and by which try --------------------------------------------------


def test_entries_report_the_write_to_the_microsecond(make_backend, redis_client, key_prefix):
    backend = make_backend()
    backend.set_by_try(TASK, "k", "v", try_number=4)
    raw = redis_client.hget(task_meta(key_prefix, "dag", "run_1", "task", -1), b"k")
    micros = int(raw.split(b":")[0])
    (entry,) = backend.entries(TASK).entries
    written_at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    assert entry == StateEntry("k", "v", written_at, 4, version=1)
    assert entry.updated_at.utcoffset() == timedelta(0)


def test_asset_state_never_records_a_try(make_backend, redis_client, key_prefix):
    backend = make_backend()
    backend.set_by_try(AssetScope(1), "k", "v", try_number=5)
    asyncio.run(backend.aset_by_try(AssetScope(1), "a", "v", try_number=6))
    assert {meta.split(b":")[1] for meta in redis_client.hvals(asset_meta(key_prefix, 1))} == {b""}
    assert [entry.updated_by_try for entry in backend.entries(AssetScope(1)).entries] == [None, None]


@pytest.mark.parametrize("scope", [TASK, AssetScope(3)], ids=["task", "asset"])
def test_values_written_before_the_metadata_are_listed_without_it(make_backend, redis_client, scope):
    backend = make_backend()
    # What a build without the metadata stored: the value hash, nothing beside it.
    redis_client.hset(backend._keys.names(scope)[0], mapping={b"old": b"from before", "clé".encode(): b"1"})
    backend.set_by_try(scope, "new", "v", try_number=2)

    page = backend.entries(scope)
    assert page.total == 3
    old = {entry.key: entry for entry in page.entries}
    # What every key was before versions: version 1, never expiring.
    assert old["old"] == StateEntry("old", "from before", None, None, version=1)
    assert old["clé"] == StateEntry("clé", "1", None, None, version=1)
    assert backend.get_versioned(scope, "old") == VersionedValue("from before", 1)
    assert old["new"].updated_at is not None
    assert backend.get(scope, "old") == "from before"
    assert backend.key_counts([scope]) == [3]

    # Written again, an old key gains its metadata and its next version; deleted, it leaves
    # nothing behind.
    assert backend.write(scope, "old", "rewritten", if_version=1) == 2
    assert backend.entries(scope, key_prefix="old").entries[0].updated_at is not None
    assert backend.increment(scope, "clé") == 2
    assert backend.get_versioned(scope, "clé") == VersionedValue("2", 2)
    backend.delete(scope, "clé")
    backend.clear(scope)
    assert backend.entries(scope) == StateEntryPage([], 0)


@pytest.mark.parametrize(
    "garbled",
    [
        b"",
        b"garbage",
        b"12:abc",
        b"12",
        b":3",
        b"-5:1",
        b"1:2:3",
        b" 12:3",
        b"12:3\n",
        b"\xff\xfe:1",
        b"1_000:2",
        b"\xd9\xa1\xd9\xa2:3",
        b"99999999999999999999:1",
    ],
)
def test_a_garbled_metadata_value_reads_as_unknown(make_backend, redis_client, key_prefix, garbled):
    backend = make_backend()
    backend.set_by_try(TASK, "k", "v", try_number=1)
    backend.set_by_try(TASK, "ok", "v", try_number=1)
    redis_client.hset(task_meta(key_prefix, "dag", "run_1", "task", -1), b"k", garbled)
    entries = backend.entries(TASK).entries
    assert entries[0] == StateEntry("k", "v", None, None, version=1)
    assert backend.get_versioned(TASK, "k") == VersionedValue("v", 1)
    assert entries[1].updated_by_try == 1 and entries[1].updated_at is not None


def test_a_metadata_key_of_another_type_is_an_error(make_backend, redis_client, key_prefix):
    # Not a format the backend ever writes: a key clobbered by hand must not be mistaken for data.
    backend = make_backend()
    backend.set(TASK, "k", "v")
    redis_client.set(task_meta(key_prefix, "dag", "run_1", "task", -1), b"not a hash")
    with pytest.raises(Exception, match="WRONGTYPE"):
        backend.entries(TASK)


def test_delete_removes_the_metadata_too(make_backend, redis_client, key_prefix):
    backend = make_backend()
    meta = task_meta(key_prefix, "dag", "run_1", "task", -1)
    backend.set(TASK, "a", "1")
    backend.set(TASK, "b", "2")
    backend.delete(TASK, "a")
    assert redis_client.hkeys(meta) == [b"b"]
    asyncio.run(backend.adelete(TASK, "b"))
    backend.set(AssetScope(1), "a", "1")
    backend.set(AssetScope(1), "b", "2")
    backend.delete(AssetScope(1), "a")
    assert redis_client.hkeys(asset_meta(key_prefix, 1)) == [b"b"]
    asyncio.run(backend.adelete(AssetScope(1), "b"))
    assert keys_under(redis_client, key_prefix) == set()


def test_deleting_the_last_key_drops_metadata_left_by_an_older_build(make_backend, redis_client, key_prefix):
    # An older build deleted values without touching the metadata: such leftovers go with the hash.
    backend = make_backend()
    backend.set(TASK, "k", "v")
    redis_client.hset(task_meta(key_prefix, "dag", "run_1", "task", -1), b"stale", b"1:1")
    backend.delete(TASK, "k")
    assert keys_under(redis_client, key_prefix) == set()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_clear_removes_the_metadata_too(make_backend, redis_client, key_prefix, use_async):
    backend = make_backend()

    def clear(scope, **kwargs):
        if use_async:
            asyncio.run(backend.aclear(scope, **kwargs))
        else:
            backend.clear(scope, **kwargs)

    for map_index in (-1, 0, 7):
        backend.set_by_try(
            TaskScope("dag", "run_1", "task", map_index, dag_run_uid=UID), "k", "v", try_number=1
        )
    backend.set(AssetScope(1), "k", "v")

    clear(TaskScope("dag", "run_1", "task", 0, dag_run_uid=UID))
    assert not redis_client.exists(task_meta(key_prefix, "dag", "run_1", "task", 0))
    assert redis_client.exists(task_meta(key_prefix, "dag", "run_1", "task", 7))
    clear(TASK, all_map_indices=True)
    clear(AssetScope(1))
    assert keys_under(redis_client, key_prefix) == set()


def test_the_metadata_gets_the_same_expiry(make_backend, redis_client, key_prefix):
    make_backend(task_ttl_seconds=1000).set(TASK, "k", "v")
    make_backend(asset_ttl_seconds=600).set(AssetScope(1), "k", "v")
    assert 990 < redis_client.ttl(task_meta(key_prefix, "dag", "run_1", "task", -1)) <= 1000
    assert 590 < redis_client.ttl(asset_meta(key_prefix, 1)) <= 600

    asyncio.run(make_backend(task_ttl_seconds=0).aset(TASK, "k", "v2"))
    make_backend(asset_ttl_seconds=None).set(AssetScope(1), "k", "v2")
    assert redis_client.ttl(task_meta(key_prefix, "dag", "run_1", "task", -1)) == -1
    assert redis_client.ttl(asset_meta(key_prefix, 1)) == -1


def test_metadata_really_expires_with_the_value(make_backend, redis_client, key_prefix):
    make_backend(task_ttl_seconds=1).set(TASK, "k", "v")
    time.sleep(1.3)
    assert keys_under(redis_client, key_prefix) == set()


# --- listing and counting ------------------------------------------------------------------


def test_a_key_deleted_between_listing_and_reading_is_skipped(make_backend, monkeypatch):
    backend = make_backend()
    for key in ("a", "b", "c"):
        backend.set(TASK, key, key)
    real_page_of_keys = airflow_state_redis.backend.page_of_keys

    def page_then_delete(*args):
        page = real_page_of_keys(*args)  # HKEYS has run; HMGET has not
        backend.delete(TASK, "b")
        return page

    monkeypatch.setattr(airflow_state_redis.backend, "page_of_keys", page_then_delete)
    page = backend.entries(TASK)
    assert [entry.key for entry in page.entries] == ["a", "c"]
    assert page.total == 3  # counted when the keys were listed


def test_listing_reads_only_the_page_and_never_scans(make_backend, redis_client):
    backend = make_backend()
    for n in range(50):
        backend.set(TASK, f"k{n:02}", str(n))
    redis_client.config_resetstat()
    page = backend.entries(TASK, key_prefix="k1", offset=2, limit=3)
    assert [entry.key for entry in page.entries] == ["k12", "k13", "k14"]
    assert page.total == 10
    stats = redis_client.info("commandstats")
    # One script lists the keys that have not expired: HKEYS of the values, HGETALL of the
    # metadata (small: no values in it). Then the page's values and metadata, nothing else.
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert stats["cmdstat_hkeys"]["calls"] == 1
    assert stats["cmdstat_hgetall"]["calls"] == 1
    assert stats["cmdstat_hmget"]["calls"] == 2
    assert not {"cmdstat_hvals", "cmdstat_hget", "cmdstat_scan", "cmdstat_hscan", "cmdstat_keys"} & set(stats)


def test_key_counts_is_one_round_trip_of_one_script_per_scope(make_backend, redis_client):
    backend = make_backend()
    scopes = [TaskScope("dag", "run_1", "task", n, dag_run_uid=UID) for n in range(20)] + [AssetScope(1)]
    for n, scope in enumerate(scopes):
        for key in range(n % 4):
            backend.set(scope, f"k{key}", "v")
    redis_client.config_resetstat()
    assert backend.key_counts(scopes) == [n % 4 for n in range(21)]
    assert backend.key_counts(tuple(scopes[:2])) == [0, 1]
    stats = redis_client.info("commandstats")
    # Each script takes the length and leaves out expired keys (from the metadata of non-empty
    # hashes only); a plain pipeline, no MULTI/EXEC, never a value read or a scan.
    assert stats["cmdstat_evalsha"]["calls"] == stats["cmdstat_hlen"]["calls"] == 23
    assert stats["cmdstat_hgetall"]["calls"] == 15 + 1
    assert not {"cmdstat_multi", "cmdstat_exec", "cmdstat_hkeys", "cmdstat_hvals", "cmdstat_scan"} & set(
        stats
    )


# --- input is checked before any I/O -------------------------------------------------------


@pytest.fixture
def unreachable_url() -> str:
    # A port nothing listens on: any I/O would fail with a connection error, not a validation one.
    return f"redis://:s3cr3t-pass@127.0.0.1:{free_port()}/0"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda b: b.set(TASK, "k", None), TypeError),
        (lambda b: b.set(TASK, "", "v"), ValueError),
        (lambda b: b.get("not a scope", "k"), TypeError),
        (lambda b: b.clear(None), TypeError),
        (lambda b: b.set(TASK, "k", "lone \ud800 surrogate"), ValueError),
        (lambda b: b.get(TASK, "bad \udfff key"), ValueError),
        (lambda b: asyncio.run(b.aset(TASK, "k", 42)), TypeError),
        (lambda b: asyncio.run(b.adelete(AssetScope(1), "k" * 513)), ValueError),
        (lambda b: b.set_by_try(TASK, "k", "v", try_number="2"), TypeError),
        (lambda b: b.set_by_try(TASK, "k", "v", try_number=True), TypeError),
        (lambda b: asyncio.run(b.aset_by_try(TASK, "k", "v", try_number=1.0)), TypeError),
        (lambda b: b.entries(TASK, offset=-1), ValueError),
        (lambda b: b.entries(AssetScope(1), key_prefix="a\x00"), ValueError),
        (lambda b: b.entries("not a scope"), TypeError),
        (lambda b: b.key_counts([TASK, AssetScope(1), "not a scope"]), TypeError),
    ],
    ids=[
        "none-value",
        "empty-key",
        "scope",
        "clear-scope",
        "surrogate-value",
        "surrogate-key",
        "async",
        "long",
        "str-try",
        "bool-try",
        "float-try-async",
        "entries-offset",
        "entries-prefix",
        "entries-scope",
        "counts-scope",
    ],
)
def test_bad_input_fails_before_touching_redis(unreachable_url, call, error):
    backend = RedisStateBackend(unreachable_url, key_prefix="p", task_ttl_seconds=1, asset_ttl_seconds=None)
    with pytest.raises(error):
        call(backend)


def uidless(map_index: int = -1) -> TaskScope:
    return TaskScope("dag", "run_1", "task", map_index)


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.set(uidless(), "k", "v"),
        lambda b: b.get(uidless(), "k"),
        lambda b: b.delete(uidless(2), "k"),
        lambda b: b.keys(uidless()),
        lambda b: b.clear(uidless()),
        lambda b: b.clear(uidless(0), all_map_indices=True),
        lambda b: asyncio.run(b.aset(uidless(), "k", "v")),
        lambda b: asyncio.run(b.aget(uidless(), "k")),
        lambda b: asyncio.run(b.adelete(uidless(), "k")),
        lambda b: asyncio.run(b.akeys(uidless())),
        lambda b: asyncio.run(b.aclear(uidless(), all_map_indices=True)),
        lambda b: b.set_by_try(uidless(), "k", "v", try_number=1),
        lambda b: asyncio.run(b.aset_by_try(uidless(), "k", "v", try_number=1)),
        lambda b: b.entries(uidless()),
        lambda b: b.key_counts([AssetScope(1), uidless()]),
    ],
    ids=[
        "set",
        "get",
        "delete",
        "keys",
        "clear",
        "clear-all",
        "aset",
        "aget",
        "adelete",
        "akeys",
        "aclear",
        "set_by_try",
        "aset_by_try",
        "entries",
        "key_counts",
    ],
)
def test_a_task_scope_without_dag_run_uid_is_refused_before_touching_redis(unreachable_url, call):
    backend = RedisStateBackend(unreachable_url, key_prefix="p", task_ttl_seconds=1, asset_ttl_seconds=None)
    # Any I/O would raise RedisStateConnectionError instead: the server does not exist.
    with pytest.raises(ValueError, match="dag_run_uid") as caught:
        call(backend)
    message = str(caught.value)
    assert "dag_id='dag', run_id='run_1'" in message
    assert "airflow_task_state.task_scope(dag_id, run_id, task_id, map_index)" in message
    assert "state API fills it" in message


def test_a_task_scope_without_dag_run_uid_writes_nothing(make_backend, redis_client, key_prefix):
    backend = make_backend()
    with pytest.raises(ValueError, match="dag_run_uid"):
        backend.set(uidless(), "k", "v")
    backend.set(AssetScope(1), "k", "v")  # asset scopes have no run, and need no uid
    assert keys_under(redis_client, key_prefix) == {f"{key_prefix}:asset:1", asset_meta(key_prefix, 1)}


def test_session_is_accepted_and_ignored(make_backend):
    backend = make_backend()
    backend.set(TASK, "k", "v", session=object())
    assert backend.get(TASK, "k", session=object()) == "v"
    backend.delete(TASK, "k", session=object())
    backend.clear(TASK, all_map_indices=True, session=object())
    assert asyncio.run(backend.aget(TASK, "k", session=object())) is None


# --- unreachable server --------------------------------------------------------------------


def _unreachable(url: str) -> RedisStateBackend:
    # One retry, not the default eight (about 10 s of backoff per call, all of it spent waiting).
    return RedisStateBackend(
        url, key_prefix="p", task_ttl_seconds=1, asset_ttl_seconds=None, topology=Topology(retries=1)
    )


def test_unreachable_server_raises_a_clear_error_with_the_password_masked(unreachable_url):
    backend = _unreachable(unreachable_url)
    with pytest.raises(RedisStateConnectionError) as caught:
        backend.get(TASK, "k")
    message = str(caught.value)
    assert "s3cr3t-pass" not in message
    assert unreachable_url.replace("s3cr3t-pass", "***") in message
    assert "[state_redis] url" in message
    assert "AIRFLOW__STATE_REDIS__URL" in message

    for call in (lambda: backend.set(TASK, "k", "v"), lambda: backend.clear(TASK, all_map_indices=True)):
        with pytest.raises(RedisStateConnectionError):
            call()


def test_unreachable_server_raises_the_same_error_from_async(unreachable_url):
    backend = _unreachable(unreachable_url)
    with pytest.raises(RedisStateConnectionError, match=r"\[state_redis\] url") as caught:
        asyncio.run(backend.aset(TASK, "k", "v"))
    assert "s3cr3t-pass" not in str(caught.value)


def test_a_malformed_url_is_refused_at_construction_with_the_password_masked():
    with pytest.raises(ValueError, match="url argument") as caught:
        RedisStateBackend("redis://:hunter2@host:notaport/0", key_prefix="p", task_ttl_seconds=1)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        # redis-py would quietly use database 0, 12 and -1: state written where nobody looks.
        ("redis://:hunter2@host:6379/abc", "database"),
        ("redis://:hunter2@host:6379/1/2", "database"),
        ("redis://:hunter2@host:6379/-1", "database"),
        # ... and port 6379 for port 0, and no socket at all for a unix URL without a path.
        ("redis://:hunter2@host:0/0", "port"),
        ("unix://:hunter2@", "path"),
        ("redis://:hunter2@[::1/0", "IPv6"),
    ],
)
def test_a_url_redis_py_would_misread_is_refused_at_construction(url, reason):
    with pytest.raises(
        ValueError, match=rf"Redis URL from the url argument is invalid \(.*{reason}"
    ) as caught:
        RedisStateBackend(url, key_prefix="p", task_ttl_seconds=1)
    assert "hunter2" not in str(caught.value)


def test_a_malformed_url_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "redis://host:6379/zero")
    with pytest.raises(ValueError, match=r"Redis URL from AIRFLOW__STATE_REDIS__URL is invalid"):
        RedisStateBackend(key_prefix="p", task_ttl_seconds=1)


def test_building_the_backend_does_no_io(unreachable_url):
    # Airflow may resolve the backend where Redis is not needed; construction must not fail there.
    backend = RedisStateBackend(unreachable_url, key_prefix="p", task_ttl_seconds=1, asset_ttl_seconds=None)
    assert "s3cr3t-pass" not in repr(backend)
    backend.close()


# --- async ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["aget", "aset", "aset_by_try", "adelete", "aclear", "akeys", "awrite", "aget_versioned", "aincrement"],
)
def test_async_methods_are_native(name):
    assert getattr(RedisStateBackend, name) is not getattr(BaseStateBackend, name)


def test_async_methods_use_neither_threads_nor_the_sync_methods(make_backend, monkeypatch):
    backend = make_backend()

    def forbidden(*args, **kwargs):
        raise AssertionError("an async method fell back to a thread or to a sync method")

    monkeypatch.setattr(asyncio, "to_thread", forbidden)
    for name in ("get", "set", "set_by_try", "delete", "clear"):
        monkeypatch.setattr(backend, name, forbidden)
    threads_before = threading.active_count()

    async def scenario() -> None:
        await backend.aset(TASK, "k", "v")
        await backend.aset_by_try(TASK, "k2", "v", try_number=2)
        assert await backend.aget(TASK, "k") == "v"
        await backend.adelete(TASK, "k")
        await backend.aclear(TASK, all_map_indices=True)
        await backend.aset(AssetScope(3), "k", "v")
        await backend.aclear(AssetScope(3))

    asyncio.run(scenario())
    assert threading.active_count() == threads_before


def test_many_concurrent_async_calls_in_one_loop(make_backend):
    backend = make_backend()
    scopes = [TaskScope("dag", "run_1", "task", i, dag_run_uid=UID) for i in range(100)]

    async def scenario() -> list[str | None]:
        await asyncio.gather(*(backend.aset(s, "k", f"v{s.map_index}") for s in scopes))
        values = await asyncio.gather(*(backend.aget(s, "k") for s in scopes))
        await backend.aclear(scopes[0], all_map_indices=True)
        return values

    assert asyncio.run(scenario()) == [f"v{i}" for i in range(100)]
    assert backend.get(scopes[42], "k") is None


def test_each_event_loop_gets_a_client_that_closes_with_it(make_backend, redis_client):
    backend = make_backend()
    backend.set(TASK, "k", "v")

    def connected() -> int:
        return len(redis_client.client_list())

    before = connected()
    for _ in range(20):
        assert asyncio.run(backend.aget(TASK, "k")) == "v"
    # asyncio.run closes each loop's client on shutdown: no connection is left behind per loop.
    assert connected() == before
    assert backend._async._items == {}


def test_async_clients_work_from_several_threads_at_once(make_backend):
    backend = make_backend()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        async def scenario() -> None:
            scope = TaskScope("dag", "run_1", "task", n, dag_run_uid=UID)
            for i in range(20):
                await backend.aset(scope, "k", str(i))
            assert await backend.aget(scope, "k") == "19"

        try:
            asyncio.run(scenario())
        except BaseException as error:  # re-raised in the test thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_aclose_closes_the_loops_client(make_backend, redis_client):
    backend = make_backend()

    async def scenario() -> None:
        await backend.aset(TASK, "k", "v")
        assert backend._async._items
        await backend.aclose()
        assert backend._async._items == {}
        # Still usable afterwards: a new client is opened on demand.
        assert await backend.aget(TASK, "k") == "v"

    asyncio.run(scenario())


# --- a retried write applies once --------------------------------------------------------------


def test_a_write_call_sent_again_applies_once_and_answers_the_same(make_backend, redis_client, key_prefix):
    """
    What a retry after a lost reply does: the same script call (same arguments, same call id)
    reaches the server a second time. It must not increment twice, bump the version twice, or
    report a conflict with itself.
    """
    backend = make_backend()
    scope = TaskScope("dag", "run", "task", dag_run_uid=UID)
    asset = AssetScope(3)
    backend.write(scope, "n", "10")
    for target in (scope, asset):
        # Each operation's first request is its script call, arguments and call id included.
        calls = [
            next(backend._op_increment(target, "n", 5)),
            next(backend._op_write(target, "cas", "v", if_version=0)),
            next(backend._op_set_many(target, {"a": "1", "b": "2"})),
        ]
        for call in calls:
            first = backend._apply(call)
            assert backend._apply(call) == first
    assert backend.get(scope, "n") == "15"
    assert backend.get(asset, "n") == "5"
    assert backend.get_versioned(scope, "cas").version == 1
    assert backend.get_versioned(asset, "a").version == 1
    # A discard sent again answers how many its first run removed.
    backend.set_by_try(scope, "by_a_cleared_try", "v", try_number=1)
    discard = next(backend._op_discard_written_through_try(scope, 1))
    assert backend._apply(discard) == backend._apply(discard) == 1
    markers = call_markers(redis_client, key_prefix)
    assert len(markers) == 9  # one per call: the first write, 3 calls per scope, the try's write, the discard
    assert all(0 < redis_client.pttl(marker) <= 60_000 for marker in markers)
    # A marker shares its scope's hash slot (a Redis Cluster runs each script on one node).
    assert {key_slot(m.encode()) for m in markers} == {
        key_slot(backend._keys.task_hash(scope).encode()),
        key_slot(backend._keys.asset_hash(asset).encode()),
    }


# --- reading one key with its metadata ------------------------------------------------------


def test_get_entry_is_one_round_trip_in_a_scope_of_10000_keys(make_backend, monkeypatch):
    backend = make_backend()
    for scope in (TASK, AssetScope(7)):
        for start in range(0, 10_000, 1000):
            backend.set_many(scope, {f"key/{n:05d}": str(n) for n in range(start, start + 1000)})
    backend.write(AssetScope(7), "key/04321", "4321", writer=CLI_WRITER)
    sent: list[bytes] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counting_send(self, command, check_health=True):
        sent.append(b"".join(command) if isinstance(command, list) else command)
        return send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting_send)
    for scope, version in ((TASK, 1), (AssetScope(7), 2)):
        sent.clear()
        entry = backend.get_entry(scope, "key/04321")
        assert entry is not None and (entry.value, entry.version) == ("4321", version)
        assert entry.updated_at is not None
        assert len(sent) == 1, sent  # one MULTI/EXEC: no listing script, no HSCAN
        assert b"HSCAN" not in sent[0] and b"EVALSHA" not in sent[0]
    assert entry.writer == CLI_WRITER


# --- staged commits ------------------------------------------------------------------------------


def _transaction_runs(connection: redis.connection.Connection) -> bool:
    """Whether a MULTI/EXEC on *connection* runs (``False``: a WATCH left on it aborted it)."""
    replies = []
    for command in (("MULTI",), ("SET", "held-probe", "1"), ("EXEC",)):
        connection.send_command(*command)
        replies.append(connection.read_response())
    return replies[-1] is not None


def test_a_commit_hands_its_connection_back_watching_nothing(make_backend):
    """
    A commit WATCHes its keys on a connection it holds, then finds itself applied (or refuses an
    increment) and sends no EXEC: the connection goes back to the pool without the WATCH, which
    would make the next transaction on it fail for a change it never cared about.
    """
    backend, other = make_backend(), make_backend()  # the same keys, through another pool
    ledger = TaskScope("held", "run", "task", dag_run_uid="1.1")
    commit = StagedCommit("held-commit", ledger, (StagedWrite(ledger, "k", StagedOp.SET, "1"),))
    refused = StagedCommit("refused", ledger, (StagedWrite(ledger, "label", StagedOp.INCREMENT),))
    assert backend.apply_commit(commit) is True
    other.set(ledger, "label", '"text"')
    for send_again in (lambda: backend.apply_commit(commit) is False, lambda: backend.apply_commit(refused)):
        try:
            assert send_again()
        except ValueError as error:
            assert "not an integer" in str(error)
        other.set(ledger, "k", "changed since")  # a key that WATCH named
        pool = backend._client.connection_pool
        connection = pool.get_connection()  # the pool hands out the connection released last
        try:
            assert _transaction_runs(connection)
        finally:
            pool.release(connection)


def test_commits_reach_redis_py_through_its_public_api_only():
    """
    A commit holds its connection with ConnectionPool.get_connection()/release() and talks with
    Connection.send_command()/read_response(): not through a Pipeline's undocumented
    immediate_execute_command() and connection attribute, which any redis-py release may change.
    """
    package = Path(airflow_state_redis.backend.__file__).parent
    called = {
        node.attr
        for module in package.glob("*.py")
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
    }
    assert "immediate_execute_command" not in called
    assert {"get_connection", "release", "send_command", "read_response"} <= called
