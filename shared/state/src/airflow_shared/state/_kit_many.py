"""The conformance kit's tests of calls on many keys, mixed into ``StateBackendConformance``."""

from __future__ import annotations

import asyncio

import pytest

from ._kit_support import BAD_KEYS, BAD_VALUES, future, past, race_reader, require
from .many import MAX_MANY_KEYS
from .validation import MAX_KEY_LENGTH
from .writes import StateCapabilityError, StateWriter, VersionedValue

#: Keys a store could mistake for one another or for its own syntax; each must stay its own key.
UNUSUAL_KEYS = [
    "a",
    "A",
    "a ",
    "ä",
    "a\u0308",  # "ä" decomposed: another string
    "%41",
    "{tag}",
    "x:y",
    "*",
    "'; DROP TABLE task_state; --",
    "\U0001f600",
    "k" * MAX_KEY_LENGTH,
]


#: Batches with one bad key or value among good ones, or of the wrong shape or size.
BAD_PAIRS = {
    **{f"{name}-key": ({"good": "1", key: "2"}, error) for name, (key, error) in BAD_KEYS.items()},
    **{f"{name}-value": ({"good": "1", "k": value}, error) for name, (value, error) in BAD_VALUES.items()},
    "too-many": ({f"k{n}": "v" for n in range(MAX_MANY_KEYS + 1)}, ValueError),
    "list": ([("good", "1")], TypeError),
}
BAD_KEY_LISTS = {
    **{f"{name}-key": (["good", key], error) for name, (key, error) in BAD_KEYS.items()},
    "a-string": ("ab", TypeError),
    "too-many": ([f"k{n}" for n in range(MAX_MANY_KEYS + 1)], ValueError),
}


class ManyKeysConformance:
    """Batches of keys: the same answers as one call per key, in one call."""

    @pytest.fixture
    def refused_keys(self) -> frozenset[str]:
        """
        Keys the store cannot hold as their own (say, those its key column cannot tell apart):
        each must be refused with a ``StateCapabilityError`` that writes nothing. Override it only
        for such a documented limit; by default every valid key is its own.
        """
        return frozenset()

    def test_get_many_returns_only_the_keys_that_hold_a_value(self, backend, scope):
        backend.set(scope, "a", "1")
        backend.set(scope, "b", "2")
        assert backend.get_many(scope, ["a", "missing", "b"]) == {"a": "1", "b": "2"}
        assert backend.get_many(scope, ["missing"]) == {}
        assert backend.get_many(scope, []) == {}
        # Repeated keys are asked once.
        assert backend.get_many(scope, ["a", "a"]) == {"a": "1"}

    def test_set_many_stores_every_pair_and_answers_the_versions(self, backend, scope):
        backend.set(scope, "old", "before")
        versions = backend.set_many(scope, {"old": "after", "new": "first"})
        assert set(versions) == {"old", "new"}
        assert backend.get(scope, "old") == "after"
        assert backend.get(scope, "new") == "first"
        if backend.supports_versions:
            assert versions == {"old": 2, "new": 1}
            assert backend.get_versioned(scope, "old") == VersionedValue("after", 2)
        else:
            assert versions == {"old": None, "new": None}
        assert backend.set_many(scope, {}) == {}

    def test_delete_many_removes_only_the_keys_named(self, backend, scope):
        backend.set_many(scope, {"a": "1", "b": "2", "c": "3"})
        backend.delete_many(scope, ["a", "c", "never_set"])
        assert backend.get_many(scope, ["a", "b", "c"]) == {"b": "2"}
        backend.delete_many(scope, [])
        assert backend.get(scope, "b") == "2"

    def test_batches_stay_in_their_scope(self, backend, make_task_scope, make_asset_scope):
        mine = make_task_scope(map_index=0)
        others = [
            make_task_scope(map_index=1),
            make_task_scope(task_id="task_2", map_index=0),
            make_task_scope(run_id="run_2", map_index=0),
            make_asset_scope(1),
        ]
        for other in others:
            backend.set(other, "k", "other's")
        backend.set_many(mine, {"k": "mine", "j": "mine too"})
        for other in others:
            assert backend.get_many(other, ["k", "j"]) == {"k": "other's"}
        backend.delete_many(mine, ["k", "j"])
        for other in others:
            assert backend.get(other, "k") == "other's"

    def test_unusual_keys_each_stay_their_own_key(self, backend, scope, refused_keys):
        for key in sorted(refused_keys):
            with pytest.raises(StateCapabilityError):
                backend.set(scope, key, "refused")
            with pytest.raises(StateCapabilityError):
                backend.set_many(scope, {"with-a-refused-key": "1", key: "refused"})
            assert backend.get(scope, key) is None
        assert backend.get(scope, "with-a-refused-key") is None
        keys = [key for key in UNUSUAL_KEYS if key not in refused_keys]
        values = {key: f"value of {key[:20]!r} #{n}" for n, key in enumerate(keys)}
        backend.set_many(scope, values)
        assert backend.get_many(scope, keys) == values
        for key, value in values.items():
            assert backend.get(scope, key) == value
        backend.delete_many(scope, keys[::2])
        assert backend.get_many(scope, keys) == {k: values[k] for k in keys[1::2]}

    def test_a_full_batch_of_the_largest_size_round_trips(self, backend, make_task_scope):
        scope = make_task_scope()
        values = {f"offset/partition-{n:04d}": str(n * 1000) for n in range(MAX_MANY_KEYS)}
        versions = backend.set_many(scope, values)
        assert len(versions) == MAX_MANY_KEYS
        assert backend.get_many(scope, list(values)) == values
        backend.delete_many(scope, list(values))
        assert backend.get_many(scope, list(values)) == {}

    @pytest.mark.parametrize(("bad", "error"), BAD_PAIRS.values(), ids=BAD_PAIRS)
    def test_set_many_refuses_a_bad_pair_and_writes_nothing(self, backend, make_task_scope, bad, error):
        scope = make_task_scope()
        with pytest.raises(error):
            backend.set_many(scope, bad)
        assert backend.get(scope, "good") is None
        assert backend.get(scope, "k0") is None

    @pytest.mark.parametrize(("keys", "error"), BAD_KEY_LISTS.values(), ids=BAD_KEY_LISTS)
    def test_get_and_delete_many_refuse_bad_keys_and_delete_nothing(
        self, backend, make_task_scope, keys, error
    ):
        scope = make_task_scope()
        backend.set(scope, "good", "kept")
        with pytest.raises(error):
            backend.get_many(scope, keys)
        with pytest.raises(error):
            backend.delete_many(scope, keys)
        assert backend.get(scope, "good") == "kept"

    def test_set_many_applies_expiry_and_the_writer(self, backend, make_task_scope, make_asset_scope):
        scope = make_task_scope()
        if not backend.supports_expiry:
            with pytest.raises(StateCapabilityError):
                backend.set_many(scope, {"a": "1", "b": "2"}, expires_at=past())
            assert backend.get_many(scope, ["a", "b"]) == {}
            return
        backend.set_many(scope, {"a": "1", "b": "2"}, expires_at=past())
        assert backend.get_many(scope, ["a", "b"]) == {}
        expires_at = future()
        writer = StateWriter.task_try(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, 3)
        backend.set_many(scope, {"a": "1", "b": "2"}, writer=writer, expires_at=expires_at)
        assert backend.get_many(scope, ["a", "b"]) == {"a": "1", "b": "2"}
        if not getattr(self, "records_writes", False):
            return
        by_key = {entry.key: entry for entry in backend.entries(scope).entries}
        for key in ("a", "b"):
            stored = by_key[key].expires_at
            assert stored is not None and abs((stored - expires_at).total_seconds()) < 0.01
            assert by_key[key].updated_by_try == 3

    def test_async_batches_match_sync(self, backend, scope):
        async def scenario(scope):
            versions = await backend.aset_many(scope, {"a": "1", "b": "2"})
            assert set(versions) == {"a", "b"}
            assert await backend.aget_many(scope, ["a", "b", "c"]) == {"a": "1", "b": "2"}
            await backend.adelete_many(scope, ["a"])
            return await backend.aget_many(scope, ["a", "b"])

        assert asyncio.run(scenario(scope)) == {"b": "2"}
        assert backend.get_many(scope, ["a", "b"]) == {"b": "2"}

    def test_atomic_batches_are_never_seen_half_applied(self, backend, make_task_scope):
        require(backend.supports_atomic_many, backend, "atomic batches")
        scope = make_task_scope()
        keys = [f"part-{n}" for n in range(8)]

        def write() -> None:
            for round_ in range(60):
                backend.set_many(scope, dict.fromkeys(keys, str(round_)))
                if round_ % 3 == 2:
                    backend.delete_many(scope, keys)

        def read() -> str | None:
            seen = backend.get_many(scope, keys)
            whole = not seen or (len(seen) == len(keys) and len(set(seen.values())) == 1)
            return None if whole else str(seen)

        race_reader("a batch", write, read)
