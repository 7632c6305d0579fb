"""The conformance kit's tests of the optional capabilities, mixed into ``StateBackendConformance``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import datetime, timedelta

import pytest

from ._kit_support import future, in_threads, listed, now, past, refused, require
from .backend import BaseStateBackend
from .writes import (
    API_WRITER,
    CLI_WRITER,
    MAX_COUNTER,
    MIN_COUNTER,
    StateCapabilityError,
    StateConflictError,
    StateWriter,
    VersionedValue,
)


def _can_increment(backend: BaseStateBackend) -> bool:
    # Without a native increment, the base class's default serves it with versioned writes.
    return backend.supports_increment or backend.supports_versions


class CapabilityConformance:
    """Versions, expiry, increments, clean-up and writers, each where the backend declares it."""

    #: True when ``entries()`` of asset state reports the :class:`StateWriter` of the last write.
    records_asset_writers: bool = False

    #: Threads, and operations per thread, of the contention tests (8 x 50 increments = 400); a
    #: slow store may lower them, never to fewer than 2 threads.
    contention_threads: int = 8
    contention_operations: int = 50

    #: True when ``entries()`` reports ``updated_at``, ``updated_by_try``, version and expiry of each key.
    records_writes: bool = False

    # --- versions --------------------------------------------------------------------------

    def test_versions_start_at_1_and_grow_on_every_kind_of_write(self, backend, scope):
        require(backend.supports_versions, backend, "versions")
        assert backend.get_versioned(scope, "k") is None
        assert backend.write(scope, "k", "a") == 1
        assert backend.get_versioned(scope, "k") == VersionedValue("a", 1)
        backend.set(scope, "k", "b")
        assert backend.get_versioned(scope, "k") == VersionedValue("b", 2)
        backend.set_by_try(scope, "k", "c", try_number=None)
        assert backend.get_versioned(scope, "k") == VersionedValue("c", 3)
        assert backend.write(scope, "k", "d", if_version=3) == 4
        assert backend.get_versioned(scope, "k") == VersionedValue("d", 4)
        if _can_increment(backend):
            assert backend.increment(scope, "n") == 1
            assert backend.get_versioned(scope, "n") == VersionedValue("1", 1)
            assert backend.write(scope, "n", "10") == 2
            assert backend.increment(scope, "n", 5) == 15
            assert backend.get_versioned(scope, "n") == VersionedValue("15", 3)
        # Versions are per key.
        assert backend.write(scope, "other", "x") == 1

    def test_a_deleted_or_cleared_key_starts_again_at_version_1(self, backend, scope):
        require(backend.supports_versions, backend, "versions")
        for value in ("1", "2", "3"):
            backend.write(scope, "k", value)
        backend.delete(scope, "k")
        assert backend.get_versioned(scope, "k") is None
        assert backend.write(scope, "k", "again") == 1
        backend.write(scope, "k", "twice")
        backend.clear(scope)
        assert backend.write(scope, "k", "after clear", if_version=0) == 1

    def test_if_version_writes_only_over_the_version_read(self, backend, scope):
        require(backend.supports_versions, backend, "versions")
        assert backend.write(scope, "k", "created", if_version=0) == 1
        assert backend.write(scope, "k", "second", if_version=1) == 2
        with pytest.raises(StateConflictError) as conflict:
            backend.write(scope, "k", "stale", if_version=1)
        assert (conflict.value.key, conflict.value.expected, conflict.value.stored) == ("k", 1, 2)
        assert "version 2" in str(conflict.value)
        with pytest.raises(StateConflictError) as conflict:
            backend.write(scope, "k", "create again", if_version=0)
        assert (conflict.value.expected, conflict.value.stored) == (0, 2)
        # A conflict writes nothing: value and version are the winner's.
        assert backend.get_versioned(scope, "k") == VersionedValue("second", 2)
        with pytest.raises(StateConflictError) as conflict:
            backend.write(scope, "absent", "v", if_version=5)
        assert (conflict.value.expected, conflict.value.stored) == (5, 0)
        assert backend.get(scope, "absent") is None

    @pytest.mark.parametrize(
        ("options", "error"),
        [
            ({"if_version": -1}, ValueError),
            ({"if_version": True}, TypeError),
            ({"if_version": "1"}, TypeError),
            ({"expires_at": datetime(2030, 1, 1)}, ValueError),  # naive: which time zone?
            ({"expires_at": "2030-01-01"}, TypeError),
        ],
        ids=["negative-version", "bool-version", "str-version", "naive-expiry", "str-expiry"],
    )
    def test_write_refuses_bad_options_and_writes_nothing(self, backend, scope, options, error):
        backend.set(scope, "k", "kept")
        refused(backend, "write", scope, "k", "new", **options, error=error)
        assert backend.get(scope, "k") == "kept"

    def test_a_writer_that_breaks_the_contract_is_refused_and_nothing_written(self, backend, scope):
        # What is stored must be what `airflow state export` writes and `import` reads back. A
        # StateWriter checks its own fields as it is built; a backend checks that it is one.
        backend.set(scope, "k", "kept")
        refused(backend, "write", scope, "k", "new", writer="api", error=TypeError)
        with pytest.raises(TypeError):
            backend.set_many(scope, {"k": "new", "other": "new"}, writer="api")
        if _can_increment(backend):
            with pytest.raises(TypeError):
                backend.increment(scope, "counter", writer="api")
        assert backend.get_many(scope, ["k", "other", "counter"]) == {"k": "kept"}

    def test_without_versions_versioned_calls_are_refused(self, backend, make_task_scope):
        if backend.supports_versions:
            pytest.skip(f"{type(backend).__name__} supports versions")
        scope = make_task_scope()
        refused(backend, "write", scope, "k", "v", if_version=0, error=StateCapabilityError)
        assert backend.get(scope, "k") is None
        refused(backend, "get_versioned", scope, "k", error=StateCapabilityError)
        # A plain write still works, and says it has no version to report.
        assert backend.write(scope, "k", "v") is None
        assert backend.get(scope, "k") == "v"

    # --- expiry ----------------------------------------------------------------------------

    def test_without_expiry_expiring_writes_are_refused(self, backend, scope):
        if backend.supports_expiry:
            pytest.skip(f"{type(backend).__name__} supports expiry")
        backend.set(scope, "k", "kept")
        refused(backend, "write", scope, "k", "v", expires_at=future(), error=StateCapabilityError)
        assert backend.get(scope, "k") == "kept"
        # Nothing of this backend can expire, so there is nothing to clean up.
        assert backend.cleanup(now=now()) == 0
        assert backend.get(scope, "k") == "kept"

    def test_expired_keys_are_invisible_to_every_read(self, backend, scope):
        require(backend.supports_expiry, backend, "expiry")
        backend.write(scope, "expired", "old", expires_at=past())
        backend.write(scope, "later", "v", expires_at=future())
        backend.write(scope, "forever", "v")
        assert backend.get(scope, "expired") is None
        assert asyncio.run(backend.aget(scope, "expired")) is None
        assert backend.get_entry(scope, "expired") is None
        assert backend.get(scope, "later") == "v"
        if backend.supports_versions:
            assert backend.get_versioned(scope, "expired") is None
            assert asyncio.run(backend.aget_versioned(scope, "expired")) is None
        assert listed(backend.keys, scope) in (None, ["forever", "later"])
        page = listed(backend.entries, scope)
        if page is not None:
            assert [entry.key for entry in page.entries] == ["forever", "later"]
            assert page.total == 2
        assert listed(backend.key_counts, [scope]) in (None, [2])
        if backend.supports_versions:  # if_version=0 finds it absent; its old version conflicts
            stale = backend.write(scope, "k", "old", expires_at=past())
            with pytest.raises(StateConflictError) as conflict:
                backend.write(scope, "k", "v", if_version=stale)
            assert conflict.value.stored == 0
            version = backend.write(scope, "k", "new", if_version=0)
            assert backend.get_versioned(scope, "k") == VersionedValue("new", version)
        if _can_increment(backend):  # an increment starts again from 0, even over a non-integer
            backend.write(scope, "n", "41", expires_at=past())
            assert backend.increment(scope, "n") == 1
            backend.write(scope, "text", '"words"', expires_at=past())
            assert backend.increment(scope, "text", 2) == 2

    def test_keys_expire_when_their_time_comes_and_a_rewrite_replaces_the_expiry(
        self, backend, make_task_scope, make_asset_scope
    ):
        require(backend.supports_expiry, backend, "expiry")
        task, asset = make_task_scope(), make_asset_scope(1)
        soon = now() + timedelta(seconds=1)
        for scope in (task, asset):
            for key in ("expires", "rewritten", "set", "set_by_try", "counter"):
                backend.write(scope, key, "1", expires_at=soon)
            backend.write(scope, "rewritten", "2")  # expires_at=None: never expires any more
            backend.set(scope, "set", "2")
            backend.set_by_try(scope, "set_by_try", "2", try_number=None)
            if _can_increment(backend):
                backend.increment(scope, "counter")
            assert backend.get(scope, "expires") == "1"
        time.sleep(max(0.0, (soon - now()).total_seconds()) + 0.2)
        for scope in (task, asset):
            assert backend.get(scope, "expires") is None
            assert backend.get(scope, "rewritten") == "2"
            assert backend.get(scope, "set") == "2"
            assert backend.get(scope, "set_by_try") == "2"
            if _can_increment(backend):
                assert backend.get(scope, "counter") == "2"

    # --- clean-up --------------------------------------------------------------------------

    @pytest.mark.parametrize("batch_size", [1000, 3], ids=["one-batch", "batches-of-3"])
    def test_cleanup_removes_only_expired_keys_and_dry_run_nothing(
        self, backend, make_task_scope, make_asset_scope, batch_size
    ):
        require(backend.supports_expiry, backend, "expiry")
        backend.cleanup(now=now())  # whatever earlier tests left expired in a shared store
        scopes = [make_task_scope(map_index=n) for n in range(3)] + [make_asset_scope(1)]
        for scope in scopes:
            for n in range(2):
                backend.write(scope, f"expired_{n}", "old", expires_at=past())
            backend.write(scope, "later", "v", expires_at=future())
            backend.write(scope, "forever", "v")
        moment = now()
        assert backend.cleanup(now=moment, batch_size=batch_size, dry_run=True) == 8
        assert backend.cleanup(now=moment, batch_size=batch_size, dry_run=True) == 8  # removed nothing
        assert backend.cleanup(now=moment, batch_size=batch_size) == 8
        assert backend.cleanup(now=moment, batch_size=batch_size) == 0
        for scope in scopes:
            assert (backend.get(scope, "later"), backend.get(scope, "forever")) == ("v", "v")
            assert backend.get(scope, "expired_0") is None
            if backend.supports_versions:
                # Physically gone: written again, the key starts over at version 1.
                assert backend.write(scope, "expired_0", "new") == 1

    def test_cleanup_removes_keys_last_written_before_updated_before(
        self, backend, make_task_scope, make_asset_scope
    ):
        require(backend.supports_expiry, backend, "expiry")
        task, asset = make_task_scope(), make_asset_scope(1)
        backend.write(task, "old", "v")
        backend.write(asset, "old", "v")
        backend.write(task, "rewritten", "v")
        time.sleep(0.1)
        cut = now()
        # Everything written before the cut, here and anywhere else in a shared store, goes.
        assert backend.cleanup(now=cut, updated_before=cut, dry_run=True) >= 3
        time.sleep(0.1)
        backend.write(task, "rewritten", "again")
        backend.write(task, "new", "v")
        assert backend.cleanup(now=now(), updated_before=cut, dry_run=True) >= 2
        removed = backend.cleanup(now=now(), updated_before=cut)
        assert removed >= 2
        assert backend.cleanup(now=now(), updated_before=cut) == 0
        assert backend.get(task, "old") is None
        assert backend.get(asset, "old") is None
        assert backend.get(task, "rewritten") == "again"
        assert backend.get(task, "new") == "v"

    # --- increments ------------------------------------------------------------------------

    def test_without_increments_increment_is_refused(self, backend, make_task_scope):
        if _can_increment(backend):
            pytest.skip(f"{type(backend).__name__} supports increments")
        scope = make_task_scope()
        refused(backend, "increment", scope, "n", error=StateCapabilityError)
        assert backend.get(scope, "n") is None

    def test_increment_counts_from_an_absent_key(self, backend, scope):
        require(_can_increment(backend), backend, "increments")
        assert backend.increment(scope, "n") == 1
        assert backend.increment(scope, "n", 5) == 6
        assert backend.increment(scope, "n", -10) == -4
        assert backend.increment(scope, "n", 0) == -4
        assert backend.get(scope, "n") == "-4"
        backend.set(scope, "set_by_hand", "41")
        assert backend.increment(scope, "set_by_hand") == 42
        assert backend.increment(scope, "down", -3) == -3

    @pytest.mark.parametrize(
        "stored",
        ['"7"', "1.5", "1e3", '{"n": 1}', "[1]", "true", "null", "", str(MAX_COUNTER + 1)],
        ids=["string", "float", "exponent", "object", "list", "bool", "null", "empty", "beyond-int64"],
    )
    def test_increment_refuses_a_value_that_is_not_an_integer(self, backend, make_task_scope, stored):
        require(_can_increment(backend), backend, "increments")
        scope = make_task_scope()
        backend.set(scope, "n", stored)
        before = backend.get_versioned(scope, "n") if backend.supports_versions else None
        refused(backend, "increment", scope, "n", error=ValueError, match="'n'")
        assert backend.get(scope, "n") == stored
        if before is not None:
            assert backend.get_versioned(scope, "n") == before

    def test_increment_refuses_to_leave_the_64_bit_range(self, backend, make_task_scope):
        require(_can_increment(backend), backend, "increments")
        scope = make_task_scope()
        backend.set(scope, "top", str(MAX_COUNTER))
        backend.set(scope, "bottom", str(MIN_COUNTER))
        for key, by in (("top", 1), ("bottom", -1), ("fresh", MAX_COUNTER + 1)):
            with pytest.raises(ValueError, match="64-bit"):
                backend.increment(scope, key, by)
        stored = [backend.get(scope, key) for key in ("top", "bottom", "fresh")]
        assert stored == [str(MAX_COUNTER), str(MIN_COUNTER), None]
        assert backend.increment(scope, "top", -1) == MAX_COUNTER - 1

    @pytest.mark.parametrize("by", [True, 1.0, "1", None], ids=["bool", "float", "str", "none"])
    def test_increment_refuses_a_by_that_is_not_an_int(self, backend, make_task_scope, by):
        require(_can_increment(backend), backend, "increments")
        scope = make_task_scope()
        refused(backend, "increment", scope, "n", by, error=TypeError, match="by")
        assert backend.get(scope, "n") is None

    # --- what operators see: version, expiry, writer -----------------------------------------

    def test_entries_carry_version_and_expiry(self, backend, scope):
        require(self.records_writes, backend, "recording writes in entries()")
        expires_at = future()
        backend.set(scope, "plain", "v")
        backend.set(scope, "plain", "v2")
        if backend.supports_expiry:
            backend.write(scope, "expiring", "v", expires_at=expires_at)
        entries = {entry.key: entry for entry in backend.entries(scope).entries}
        assert entries["plain"].expires_at is None
        if backend.supports_versions:
            assert entries["plain"].version == 2
        if backend.supports_expiry:
            stored = entries["expiring"].expires_at
            assert stored is not None and stored.tzinfo is not None
            assert abs((stored - expires_at).total_seconds()) < 0.01
            if backend.supports_versions:
                assert entries["expiring"].version == 1

    def test_entries_name_the_writer_of_asset_state(self, backend, make_task_scope, make_asset_scope):
        require(self.records_asset_writers, backend, "recording the writer of asset state")
        asset, task = make_asset_scope(1), make_task_scope()
        by_task = StateWriter.task_try("etl", "manual__2026", "load", 3, 2)
        backend.write(asset, "by_task", "1", writer=by_task)
        backend.write(asset, "by_api", "1", writer=API_WRITER)
        backend.write(asset, "by_task_then_cli", "1", writer=by_task)
        backend.write(asset, "by_task_then_cli", "2", writer=CLI_WRITER)
        backend.write(asset, "unknown", "1", writer=by_task)
        backend.set(asset, "unknown", "2")  # a write that does not say who: no stale writer left
        asyncio.run(backend.awrite(asset, "async", "1", writer=StateWriter.task_try("d", "r", "t", -1, 1)))
        if _can_increment(backend):
            backend.increment(asset, "counter", writer=by_task)
        writers = {entry.key: entry.writer for entry in backend.entries(asset).entries}
        expected = {
            "async": StateWriter.task_try("d", "r", "t", -1, 1),
            "by_api": API_WRITER,
            "by_task": by_task,
            "by_task_then_cli": CLI_WRITER,
            "unknown": None,
        }
        if _can_increment(backend):
            expected["counter"] = by_task
        assert writers == expected
        # Task state records the writing try, as set_by_try does.
        backend.write(task, "k", "v", writer=StateWriter.task_try("etl", "r", "t", -1, 4))
        (entry,) = backend.entries(task).entries
        assert entry.updated_by_try == 4

    # --- async parity ----------------------------------------------------------------------

    def test_async_capabilities_match_sync(self, backend, make_task_scope, make_asset_scope):
        require(backend.supports_versions, backend, "versions")
        scope = make_task_scope(map_index=4)

        async def scenario() -> None:
            assert await backend.awrite(scope, "k", "a", if_version=0) == 1
            assert await backend.aget_versioned(scope, "k") == VersionedValue("a", 1)
            with pytest.raises(StateConflictError) as conflict:
                await backend.awrite(scope, "k", "b", if_version=0)
            assert conflict.value.stored == 1
            if _can_increment(backend):
                assert await backend.aincrement(scope, "n", 3) == 3
                assert await backend.aincrement(scope, "n") == 4
            if backend.supports_expiry:
                await backend.awrite(scope, "gone", "v", expires_at=past())
                assert await backend.aget_versioned(scope, "gone") is None

        asyncio.run(scenario())
        assert backend.get_versioned(scope, "k") == VersionedValue("a", 1)
        if _can_increment(backend):
            assert backend.get(scope, "n") == "4"
            assert backend.increment(scope, "n") == 5

    # --- contention ------------------------------------------------------------------------

    def test_concurrent_increments_lose_nothing(self, backend, make_task_scope, make_asset_scope):
        require(_can_increment(backend), backend, "increments")
        threads, operations = self.contention_threads, self.contention_operations
        task, asset = make_task_scope(), make_asset_scope(1)
        returned: list[int] = []

        def count(n: int) -> None:
            scope = task if n % 2 == 0 else asset
            mine = [backend.increment(scope, "hits") for _ in range(operations)]
            returned.extend(mine)

        in_threads(threads, count)
        even, odd = (threads + 1) // 2, threads // 2
        assert backend.get(task, "hits") == str(even * operations)
        assert backend.get(asset, "hits") == str(odd * operations)
        # Every increment saw its own result: no two returned the same number in one scope.
        assert sorted(returned) == sorted([*range(1, even * operations + 1), *range(1, odd * operations + 1)])

    def test_concurrent_compare_and_set_appends_lose_nothing(self, backend, make_task_scope):
        require(backend.supports_versions, backend, "versions")
        scope = make_task_scope()
        appends = max(1, self.contention_operations // 5)

        def append(n: int) -> None:
            for i in range(appends):
                while True:  # what update(key, fn) does: read, change, write if unchanged, else retry
                    stored = backend.get_versioned(scope, "log")
                    items, version = (json.loads(stored.value), stored.version) if stored else ([], 0)
                    with contextlib.suppress(StateConflictError):
                        backend.write(scope, "log", json.dumps([*items, f"{n}-{i}"]), if_version=version)
                        break

        in_threads(self.contention_threads, append)
        final = backend.get_versioned(scope, "log")
        assert final is not None
        items = json.loads(final.value)
        expected = [f"{n}-{i}" for n in range(self.contention_threads) for i in range(appends)]
        assert sorted(items) == sorted(expected)
        assert final.version == len(expected)  # one successful write per element, nothing else

    def test_concurrent_if_version_writers_exactly_one_wins_each_round(self, backend, make_asset_scope):
        require(backend.supports_versions, backend, "versions")
        scope = make_asset_scope(1)
        version = backend.write(scope, "leader", "nobody")
        assert version == 1
        wins: list[int] = []
        losses: list[StateConflictError] = []

        def contend(n: int) -> None:
            try:
                backend.write(scope, "leader", f"writer-{n}", if_version=version)
                wins.append(n)
            except StateConflictError as conflict:
                losses.append(conflict)

        for _round in range(5):
            wins.clear()
            losses.clear()
            in_threads(self.contention_threads, contend)
            assert len(wins) == 1, wins
            assert len(losses) == self.contention_threads - 1
            assert {loss.stored for loss in losses} == {version + 1}
            version += 1
            assert backend.get_versioned(scope, "leader") == VersionedValue(f"writer-{wins[0]}", version)
