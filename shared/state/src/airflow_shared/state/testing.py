"""
The conformance kit: the pytest suite every :class:`BaseStateBackend` must pass. Subclass
:class:`StateBackendConformance` and provide a ``backend`` fixture; docs/writing-a-backend.md
says which fixtures and attributes to override. A backend that wraps another also passes
:class:`StateBackendWrapperConformance`. Requires pytest (``airflow-state-contract[testing]``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ._kit_capabilities import CapabilityConformance
from ._kit_many import ManyKeysConformance
from ._kit_staged import StagedCommitConformance
from ._kit_support import BAD_KEYS, BAD_VALUES, in_threads, listed, refused, require, require_listing
from ._kit_wrapper import StateBackendWrapperConformance as StateBackendWrapperConformance
from ._memory import MemoryStateBackend as MemoryStateBackend
from .backend import BaseStateBackend
from .entries import StateEntryPage
from .scopes import AssetScope, StateScope, TaskScope
from .validation import MAX_KEY_LENGTH


def _writes(scope: object, key: object, value: object) -> dict[str, Any]:
    """The arguments of each single-key write (each has an async twin) storing *value* under *key*."""
    try_number = 1 if isinstance(scope, TaskScope) else None
    return {
        "set": ((scope, key, value), {}),
        "set_by_try": ((scope, key, value), {"try_number": try_number}),
        "write": ((scope, key, value), {}),
    }


class StateBackendConformance(CapabilityConformance, ManyKeysConformance, StagedCommitConformance):
    """The behaviour a DAG author relies on, whichever backend stores the state."""

    #: True only when the store deletes task state together with the ``dag_run`` row (a foreign
    #: key, as in the metastore): the kit then skips the tests that require keying on ``dag_run_uid``.
    task_state_cascades_with_dag_run: bool = False

    @pytest.fixture
    def backend(self) -> BaseStateBackend:
        raise NotImplementedError("provide a `backend` fixture returning the backend under test")

    @pytest.fixture
    def make_task_scope(self) -> Callable[..., TaskScope]:
        """``make(run_id, task_id, map_index) -> TaskScope``; override it to create the run first."""

        def make(run_id: str = "run_1", task_id: str = "task_1", map_index: int = -1) -> TaskScope:
            return TaskScope("conformance_dag", run_id, task_id, map_index, dag_run_uid=f"uid-{run_id}")

        return make

    @pytest.fixture
    def recreate_dag_run(self) -> Callable[[TaskScope], TaskScope]:
        """
        ``recreate(scope) -> TaskScope``: the scope in the dag run deleted and created again with the
        same ids. The default only gives it a new ``dag_run_uid``, all a store without foreign keys sees.
        """

        def recreate(scope: TaskScope) -> TaskScope:
            return dataclasses.replace(scope, dag_run_uid=f"uid-{scope.run_id}-{uuid.uuid4().hex}")

        return recreate

    @pytest.fixture
    def make_asset_scope(self) -> Callable[[int], AssetScope]:
        """Return ``make(n) -> AssetScope`` for the n-th (1, 2, ...) distinct asset."""
        return AssetScope

    @pytest.fixture(params=["task", "asset"])
    def scope(self, request, make_task_scope, make_asset_scope) -> StateScope:
        """A task scope, then an asset scope: each test taking it holds for both alike."""
        return make_task_scope() if request.param == "task" else make_asset_scope(1)

    # --- round trips ---------------------------------------------------------------------

    def test_missing_key_reads_as_none_and_deleting_or_clearing_is_no_error(self, backend, scope):
        assert backend.get(scope, "never_set") is None
        backend.delete(scope, "never_set")
        backend.clear(scope)
        backend.clear(scope, all_map_indices=True)

    def test_set_then_get_returns_the_value_and_set_overwrites(self, backend, scope):
        backend.set(scope, "watermark", "2026-11-30T00:00:00+00:00")
        assert backend.get(scope, "watermark") == "2026-11-30T00:00:00+00:00"
        backend.set(scope, "k", "first")
        backend.set(scope, "k", "second")
        assert backend.get(scope, "k") == "second"

    def test_keys_and_values_round_trip_exactly(self, backend, scope):
        samples = {
            "empty": "",
            "unicode": "naïve ☃ 東京 \U0001f680",
            "whitespace": "  leading and trailing\n\ttabs  ",
            "json": '{"a": [1, 2.5, null, true], "b": "x"}',
            "large": "x" * 300_000,
            "Key": "keys are case-sensitive",
            "k" * MAX_KEY_LENGTH: "the longest key",
        }
        for key, value in samples.items():
            backend.set(scope, key, value)
        for key, value in samples.items():
            assert backend.get(scope, key) == value, key[:20]

    # --- isolation -----------------------------------------------------------------------

    @pytest.mark.parametrize("differing", ["run", "task", "map index", "asset", "namespace"])
    def test_scopes_are_isolated(self, backend, make_task_scope, make_asset_scope, differing):
        one, two, three = {
            "run": lambda: [make_task_scope(run_id=f"run_{n}") for n in (1, 2, 3)],
            "task": lambda: [make_task_scope(task_id=f"task_{n}") for n in (1, 2, 3)],
            "map index": lambda: [make_task_scope(map_index=n) for n in (0, 1, -1)],
            "asset": lambda: [make_asset_scope(n) for n in (1, 2, 3)],
            "namespace": lambda: [make_task_scope(), make_asset_scope(1), make_task_scope(map_index=2)],
        }[differing]()
        backend.set(one, "k", "one")
        assert backend.get(two, "k") is None
        backend.set(two, "k", "two")
        assert (backend.get(one, "k"), backend.get(two, "k"), backend.get(three, "k")) == ("one", "two", None)

    # --- delete and clear ----------------------------------------------------------------

    def test_delete_removes_only_that_key(self, backend, scope):
        backend.set(scope, "gone", "1")
        backend.set(scope, "kept", "2")
        backend.delete(scope, "gone")
        assert backend.get(scope, "gone") is None
        assert backend.get(scope, "kept") == "2"

    @pytest.mark.parametrize("kind", ["task", "asset"])
    def test_clear_clears_only_that_scope(self, backend, make_task_scope, make_asset_scope, kind):
        if kind == "task":  # only its own map index, not another task's
            target, *others = [make_task_scope(map_index=n) for n in (0, 1)] + [
                make_task_scope(task_id="other_task", map_index=0),
                make_asset_scope(1),
            ]
        else:
            target, *others = [make_asset_scope(1), make_asset_scope(2), make_task_scope()]
        for scope in (target, *others):
            backend.set(scope, "a", "kept")
        backend.set(target, "b", "y")
        backend.clear(target)
        assert (backend.get(target, "a"), backend.get(target, "b")) == (None, None)
        assert [backend.get(scope, "a") for scope in others] == ["kept"] * len(others)

    def test_clear_all_map_indices_clears_the_task_in_that_run_only(self, backend, make_task_scope):
        for map_index in (-1, 0, 1, 2):
            backend.set(make_task_scope(map_index=map_index), "k", str(map_index))
        backend.set(make_task_scope(task_id="other_task", map_index=0), "k", "other task")
        backend.set(make_task_scope(run_id="run_2", map_index=0), "k", "other run")

        backend.clear(make_task_scope(map_index=1), all_map_indices=True)

        for map_index in (-1, 0, 1, 2):
            assert backend.get(make_task_scope(map_index=map_index), "k") is None
        assert backend.get(make_task_scope(task_id="other_task", map_index=0), "k") == "other task"
        assert backend.get(make_task_scope(run_id="run_2", map_index=0), "k") == "other run"

    # --- a dag run deleted and created again with the same run_id -----------------------

    def test_a_recreated_dag_run_starts_empty_and_can_be_written(
        self, backend, make_task_scope, recreate_dag_run
    ):
        old = {map_index: make_task_scope(map_index=map_index) for map_index in (-1, 0, 1)}
        for map_index, scope in old.items():
            backend.set(scope, "remote_job_id", f"app_{map_index}")
            backend.set(scope, "checkpoint", "page 3")

        new = recreate_dag_run(old[0])

        # The same dag, run, task and map index: only the incarnation differs.
        assert dataclasses.replace(new, dag_run_uid=None) == dataclasses.replace(old[0], dag_run_uid=None)
        for map_index in (-1, 0, 1):
            scope = dataclasses.replace(new, map_index=map_index)
            assert backend.get(scope, "remote_job_id") is None, map_index
            assert backend.get(scope, "checkpoint") is None, map_index
            assert listed(backend.keys, scope) in (None, []), map_index
            assert asyncio.run(backend.aget(scope, "remote_job_id")) is None, map_index
        backend.set(new, "remote_job_id", "app_new")
        asyncio.run(backend.aset(new, "checkpoint", "page 1"))
        assert backend.get(new, "remote_job_id") == "app_new"
        assert asyncio.run(backend.aget(new, "checkpoint")) == "page 1"
        assert listed(backend.keys, new) in (None, ["checkpoint", "remote_job_id"])
        backend.delete(new, "checkpoint")
        assert backend.get(new, "checkpoint") is None
        assert backend.get(new, "remote_job_id") == "app_new"

    def test_clear_all_map_indices_in_a_recreated_run_touches_nothing_else(
        self, backend, make_task_scope, recreate_dag_run
    ):
        old = make_task_scope(map_index=0)
        backend.set(old, "k", "old run")
        backend.set(make_task_scope(map_index=1), "k", "old run")
        other_run = make_task_scope(run_id="run_2", map_index=0)
        backend.set(other_run, "k", "other run")

        new = recreate_dag_run(old)
        other_task = dataclasses.replace(new, task_id="other_task")
        backend.set(dataclasses.replace(new, map_index=3), "k", "new run")
        backend.set(other_task, "k", "other task")
        backend.clear(new, all_map_indices=True)

        for map_index in (-1, 0, 1, 3):
            assert backend.get(dataclasses.replace(new, map_index=map_index), "k") is None, map_index
        assert backend.get(other_task, "k") == "other task"
        assert backend.get(other_run, "k") == "other run"
        # Clearing again, now that nothing is left, must not bring anything back either.
        backend.clear(new, all_map_indices=True)
        assert backend.get(new, "k") is None
        assert backend.get(dataclasses.replace(new, map_index=1), "k") is None

    def test_scopes_differing_only_by_dag_run_uid_are_isolated(self, backend, make_task_scope):
        if self.task_state_cascades_with_dag_run:
            pytest.skip("the store deletes task state with the dag_run row and may ignore dag_run_uid")
        one = make_task_scope(map_index=0)
        assert one.dag_run_uid is not None, "make_task_scope must fill dag_run_uid"
        two = dataclasses.replace(one, dag_run_uid=f"{one.dag_run_uid}-other-incarnation")
        for scope, value in ((one, "one"), (two, "two")):
            backend.set(scope, "k", value)
            backend.set(scope, "gone", value)
            backend.set(dataclasses.replace(scope, map_index=1), "k", value)

        assert backend.get(one, "k") == "one"
        assert backend.get(two, "k") == "two"
        backend.delete(two, "gone")
        assert backend.get(one, "gone") == "one"
        assert listed(backend.keys, one) in (None, ["gone", "k"])
        assert listed(backend.keys, two) in (None, ["k"])

        backend.clear(two)
        assert backend.get(one, "k") == "one"
        backend.clear(two, all_map_indices=True)
        assert backend.get(two, "k") is None
        assert backend.get(dataclasses.replace(two, map_index=1), "k") is None
        assert backend.get(one, "k") == "one"
        assert backend.get(dataclasses.replace(one, map_index=1), "k") == "one"

    def test_task_scope_without_dag_run_uid_is_refused(self, backend, make_task_scope):
        if self.task_state_cascades_with_dag_run:
            pytest.skip("the store deletes task state with the dag_run row and may ignore dag_run_uid")
        complete = make_task_scope()
        incomplete = dataclasses.replace(complete, dag_run_uid=None)
        uid = {"error": ValueError, "match": "dag_run_uid"}
        refused(backend, "set", incomplete, "k", "v", **uid)
        for method in ("get", "delete"):
            refused(backend, method, incomplete, "k", **uid)
        for all_map_indices in (False, True):
            refused(backend, "clear", incomplete, all_map_indices=all_map_indices, **uid)
        if listed(backend.keys, complete) is not None:  # listing is optional
            with pytest.raises(ValueError, match="dag_run_uid"):
                backend.keys(incomplete)
        assert backend.get(complete, "k") is None

    # --- writes that name the writing try -----------------------------------------------

    def test_set_by_try_stores_and_overwrites_like_set(self, backend, make_task_scope, scope):
        by_task = isinstance(scope, TaskScope)  # asset state is never written by a try
        backend.set(scope, "k", "from set")
        backend.set_by_try(scope, "k", "from try 1", try_number=1 if by_task else None)
        assert backend.get(scope, "k") == "from try 1"
        asyncio.run(backend.aset_by_try(scope, "k", "from try 2", try_number=2 if by_task else None))
        assert asyncio.run(backend.aget(scope, "k")) == "from try 2"
        backend.set(scope, "k", "from set again")
        assert backend.get(scope, "k") == "from set again"
        backend.set_by_try(scope, "from_outside_a_task", "x", try_number=None)
        assert backend.get(scope, "from_outside_a_task") == "x"
        assert listed(backend.keys, scope) in (None, ["from_outside_a_task", "k"])
        assert backend.get(make_task_scope(map_index=1), "k") is None

    def test_discard_written_through_try_removes_only_those_tries_keys(self, backend, make_task_scope):
        # What a try does as it starts after a clear of a try that had succeeded (see docs/clearing.md).
        require(self.records_writes, backend, "recording writes in entries()")
        scope, other_index, other_run = (
            make_task_scope(map_index=0),
            make_task_scope(map_index=1),
            make_task_scope(run_id="run_2", map_index=0),
        )
        for try_number in (1, 2, 3):
            backend.set_by_try(scope, f"by_try_{try_number}", "v", try_number=try_number)
        backend.set(scope, "by_an_operator", "v")
        backend.set_by_try(scope, "rewritten_by_try_3", "old", try_number=1)
        backend.set_by_try(scope, "rewritten_by_try_3", "new", try_number=3)
        for elsewhere in (other_index, other_run):
            backend.set_by_try(elsewhere, "by_try_1", "v", try_number=1)
        assert backend.discard_written_through_try(scope, 0) == 0
        assert backend.discard_written_through_try(scope, 2) == 2
        assert backend.get(scope, "by_try_1") is backend.get(scope, "by_try_2") is None
        assert backend.get_many(scope, ["by_try_3", "by_an_operator", "rewritten_by_try_3"]) == {
            "by_try_3": "v",
            "by_an_operator": "v",
            "rewritten_by_try_3": "new",
        }
        # Run again (every process of the try does, as it starts): nothing more goes.
        assert backend.discard_written_through_try(scope, 2) == 0
        assert backend.get(other_index, "by_try_1") == backend.get(other_run, "by_try_1") == "v"

    @pytest.mark.parametrize(
        ("try_number", "error"), [(-1, ValueError), (True, TypeError), ("1", TypeError), (None, TypeError)]
    )
    def test_discard_written_through_try_refuses_bad_input(
        self, backend, make_task_scope, make_asset_scope, try_number, error
    ):
        scope = make_task_scope()
        backend.set_by_try(scope, "k", "v", try_number=1)
        with pytest.raises(error):
            backend.discard_written_through_try(scope, try_number)
        with pytest.raises(TypeError):
            backend.discard_written_through_try(make_asset_scope(1), 1)
        assert backend.get(scope, "k") == "v"

    # --- listing: keys, entries, counts (optional; what operators see) ---------------------

    def test_keys_and_entries_list_exactly_this_scope_sorted(
        self, backend, make_task_scope, make_asset_scope
    ):
        scope = make_task_scope(map_index=0)
        require_listing(backend, scope)
        assert (backend.keys(scope), backend.entries(scope)) == ([], StateEntryPage([], 0))
        stored = {"b": "2", "a": '{"x": 1}', "Z": "", "ü": "naïve ☃", "ab": "x" * 70_000, "gone": "v"}
        for key, value in stored.items():
            backend.set(scope, key, value)
        backend.set(make_task_scope(map_index=1), "other_map_index", "v")
        backend.set(make_task_scope(run_id="run_2", map_index=0), "other_run", "v")
        backend.set(make_asset_scope(1), "asset_key", "v")
        backend.delete(scope, "gone")
        del stored["gone"]
        assert backend.keys(scope) == asyncio.run(backend.akeys(scope)) == sorted(stored)
        page = backend.entries(scope)
        assert [(entry.key, entry.value) for entry in page.entries] == sorted(stored.items())
        assert page.total == 5
        assert backend.keys(make_asset_scope(1)) == ["asset_key"]
        assert [entry.key for entry in backend.entries(make_asset_scope(1)).entries] == ["asset_key"]
        backend.clear(scope)
        assert backend.keys(scope) == []

    def test_entries_filter_by_prefix_and_page(self, backend, make_task_scope):
        scope = make_task_scope()
        require_listing(backend, scope)
        for n in range(7):
            backend.set(scope, f"job/{n}", str(n))
        backend.set(scope, "jobs", "not under job/")
        backend.set(scope, "other", "o")
        page = backend.entries(scope, key_prefix="job/", offset=2, limit=3)
        assert [entry.key for entry in page.entries] == ["job/2", "job/3", "job/4"]
        assert [entry.value for entry in page.entries] == ["2", "3", "4"]
        assert page.total == 7
        assert backend.entries(scope, key_prefix="job/", offset=6).entries[0].key == "job/6"
        assert backend.entries(scope, offset=20) == StateEntryPage([], 9)
        assert backend.entries(scope, limit=0) == StateEntryPage([], 9)
        assert backend.entries(scope, key_prefix="nothing") == StateEntryPage([], 0)
        # A prefix is text, not a pattern: SQL LIKE and Redis MATCH wildcards mean themselves.
        backend.set(scope, "100%_done", "v")
        backend.set(scope, "1000_done", "v")
        backend.set(scope, "a*b", "v")
        backend.set(scope, "a[b", "v")
        assert [e.key for e in backend.entries(scope, key_prefix="100%").entries] == ["100%_done"]
        assert [e.key for e in backend.entries(scope, key_prefix="a*").entries] == ["a*b"]
        assert [e.key for e in backend.entries(scope, key_prefix="a[").entries] == ["a[b"]
        assert [e.key for e in backend.entries(scope, key_prefix="10_").entries] == []

    @pytest.mark.parametrize(
        ("arguments", "error"),
        [
            ({"key_prefix": 3}, TypeError),
            ({"key_prefix": "a\x00"}, ValueError),
            ({"offset": -1}, ValueError),
            ({"offset": None}, TypeError),
            ({"limit": -1}, ValueError),
            ({"limit": True}, TypeError),
        ],
        ids=["int-prefix", "nul-prefix", "negative-offset", "none-offset", "negative-limit", "bool-limit"],
    )
    def test_entries_refuse_bad_arguments(self, backend, make_task_scope, arguments, error):
        require_listing(backend, make_task_scope())
        with pytest.raises(error):
            backend.entries(make_task_scope(), **arguments)

    def test_entries_report_when_and_by_which_try(self, backend, make_task_scope, make_asset_scope):
        require(self.records_writes, backend, "recording writes in entries()")
        task, asset = make_task_scope(), make_asset_scope(1)
        before = datetime.now(UTC) - timedelta(seconds=5)
        backend.set_by_try(task, "by_try_2", "v", try_number=2)
        asyncio.run(backend.aset_by_try(task, "by_try_3", "v", try_number=3))
        backend.set(task, "by_an_operator", "v")
        backend.set_by_try(task, "rewritten", "v", try_number=1)
        backend.set_by_try(task, "rewritten", "v", try_number=None)
        backend.set(asset, "watermark", "v")
        after = datetime.now(UTC) + timedelta(seconds=5)
        entries = {entry.key: entry for entry in backend.entries(task).entries}
        assert {key: entry.updated_by_try for key, entry in entries.items()} == {
            "by_an_operator": None,
            "by_try_2": 2,
            "by_try_3": 3,
            "rewritten": None,
        }
        (asset_entry,) = backend.entries(asset).entries
        assert asset_entry.updated_by_try is None
        for entry in [*entries.values(), asset_entry]:
            assert entry.updated_at is not None and entry.updated_at.tzinfo is not None, entry
            assert before <= entry.updated_at <= after, entry

    def test_get_entry_is_the_listed_entry_of_that_key(self, backend, make_task_scope, scope):
        # Keys around the one read: longer ones it prefixes, one that sorts before, another scope's.
        backend.set(scope, "a", "before")
        backend.set_by_try(scope, "job", "mine", try_number=2)
        backend.set(scope, "job/1", "longer")
        backend.set(scope, "jobs", "longer too")
        backend.set(make_task_scope(map_index=3), "other", "other's")
        if backend.supports_expiry and isinstance(scope, AssetScope):
            backend.write(scope, "job", "mine", expires_at=datetime.now(UTC) + timedelta(hours=1))
        found = backend.get_entry(scope, "job")
        assert found is not None and found.value == "mine"
        page = listed(backend.entries, scope)
        if page is not None:
            assert found == {entry.key: entry for entry in page.entries}["job"]
        for absent in ("jo", "job/", "never_set", "other"):  # a prefix of keys is not a key
            assert backend.get_entry(scope, absent) is None
        if self.records_writes and isinstance(scope, TaskScope):
            assert found.updated_by_try == 2
        backend.delete(scope, "job")
        assert backend.get_entry(scope, "job") is None

    def test_key_counts_count_each_scope(self, backend, make_task_scope, make_asset_scope):
        scopes = [make_task_scope(map_index=n) for n in (-1, 0, 1)] + [
            make_asset_scope(1),
            make_asset_scope(2),
        ]
        require_listing(backend, scopes[0])
        assert backend.key_counts(scopes) == [0, 0, 0, 0, 0]
        for n, scope in enumerate(scopes):
            for key in range(n):
                backend.set(scope, f"k{key}", "v")
        backend.delete(scopes[4], "k0")
        backend.set(make_task_scope(run_id="run_2", map_index=1), "elsewhere", "v")
        assert backend.key_counts(scopes) == [0, 1, 2, 3, 3]
        assert backend.key_counts(list(reversed(scopes))) == [3, 3, 2, 1, 0]
        assert backend.key_counts([]) == []

    # --- async parity --------------------------------------------------------------------

    def test_async_methods_match_sync(self, backend, make_task_scope, make_asset_scope):
        task, asset = make_task_scope(map_index=3), make_asset_scope(1)

        async def scenario() -> None:
            await backend.aset(task, "k", "async value")
            assert await backend.aget(task, "k") == "async value"
            await backend.aset(asset, "k", "async asset value")
            assert await backend.aget(asset, "k") == "async asset value"
            assert await backend.aget(task, "missing") is None
            await backend.adelete(task, "k")
            assert await backend.aget(task, "k") is None
            await backend.adelete(task, "missing")
            await backend.aset(task, "a", "1")
            await backend.aclear(task)
            assert await backend.aget(task, "a") is None
            await backend.aset(task, "a", "1")
            await backend.aclear(make_task_scope(map_index=0), all_map_indices=True)
            assert await backend.aget(task, "a") is None
            await backend.aclear(asset)
            assert await backend.aget(asset, "k") is None

        asyncio.run(scenario())
        # What async wrote, sync reads, and the other way round.
        backend.set(task, "from_sync", "s")
        assert asyncio.run(backend.aget(task, "from_sync")) == "s"
        asyncio.run(backend.aset(task, "from_async", "a"))
        assert backend.get(task, "from_async") == "a"

    def test_async_calls_can_run_concurrently(self, backend, make_task_scope):
        scopes = [make_task_scope(map_index=i) for i in range(5)]

        async def scenario() -> list[str | None]:
            await asyncio.gather(*(backend.aset(s, "k", f"v{s.map_index}") for s in scopes))
            return await asyncio.gather(*(backend.aget(s, "k") for s in scopes))

        assert asyncio.run(scenario()) == [f"v{i}" for i in range(5)]

    # --- concurrency ---------------------------------------------------------------------

    def test_concurrent_writes_to_one_key_never_fail_and_one_wins(self, backend, make_task_scope):
        scope = make_task_scope()

        def write(n: int) -> None:
            for _ in range(5):
                backend.set(scope, "contended", f"writer-{n}")

        in_threads(8, write)
        assert backend.get(scope, "contended") in [f"writer-{n}" for n in range(8)]

    # --- bad input -----------------------------------------------------------------------

    @pytest.mark.parametrize(("key", "error"), BAD_KEYS.values(), ids=BAD_KEYS)
    def test_bad_keys_are_refused_everywhere(self, backend, scope, key, error):
        backend.set(scope, "k", "kept")
        for method, args in _writes(scope, key, "v").items():
            refused(backend, method, *args[0], **args[1], error=error, match="key")
        for method in ("get", "delete"):
            refused(backend, method, scope, key, error=error, match="key")
        with pytest.raises(error, match="key"):
            backend.get_entry(scope, key)
        assert backend.get(scope, "k") == "kept"

    @pytest.mark.parametrize(("value", "error"), BAD_VALUES.values(), ids=BAD_VALUES)
    def test_bad_values_are_refused_and_nothing_is_lost(self, backend, scope, value, error):
        backend.set(scope, "k", "kept")
        for method, args in _writes(scope, "k", value).items():
            refused(backend, method, *args[0], **args[1], error=error, match="value")
        assert backend.get(scope, "k") == "kept"

    @pytest.mark.parametrize("bad_scope", [None, "dag/run/task", ("dag", "run", "task", -1), 7])
    def test_wrong_scope_types_are_refused(self, backend, make_task_scope, bad_scope):
        for method, args in _writes(bad_scope, "k", "v").items():
            refused(backend, method, *args[0], **args[1], error=TypeError, match="scope")
        for method in ("get", "delete"):
            refused(backend, method, bad_scope, "k", error=TypeError, match="scope")
        with pytest.raises(TypeError, match="scope"):
            backend.clear(bad_scope)
        with pytest.raises(TypeError, match="scope"):
            backend.get_entry(bad_scope, "k")
        if listed(backend.keys, make_task_scope()) is not None:  # listing is optional
            for listing in (backend.keys, backend.entries):
                with pytest.raises(TypeError, match="scope"):
                    listing(bad_scope)
