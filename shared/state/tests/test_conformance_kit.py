"""The kit run against a correct backend passes, and against broken ones fails."""

from __future__ import annotations

import textwrap
import threading

import pytest
from airflow_shared.state import AssetScope, BaseStateBackend, StateEntry, StateEntryPage, TaskScope
from airflow_shared.state.testing import MemoryStateBackend, StateBackendConformance


class TestMemoryBackendConforms(StateBackendConformance):
    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self):
        return MemoryStateBackend()


class KeysAndValuesOnly(MemoryStateBackend):
    """A backend that lists keys but records nothing of writes: it gets the default entries()."""

    entries = BaseStateBackend.entries
    key_counts = BaseStateBackend.key_counts
    get_entry = BaseStateBackend.get_entry


class TestDefaultListingConforms(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        return KeysAndValuesOnly()


def test_default_entries_know_nothing_of_writes():
    backend = KeysAndValuesOnly()
    scope = TaskScope("d", "r", "t", dag_run_uid="u")
    backend.set_by_try(scope, "k", "v", try_number=2)
    assert backend.entries(scope) == StateEntryPage([StateEntry("k", "v")], 1)


def test_async_defaults_run_in_a_worker_thread():
    import asyncio

    seen: list[str] = []

    class Recording(MemoryStateBackend):
        def get(self, scope, key, *, session=None):
            seen.append(threading.current_thread().name)
            return super().get(scope, key, session=session)

    backend = Recording()
    asyncio.run(backend.aget(TaskScope("d", "r", "t", dag_run_uid="u"), "k"))
    assert seen and seen[0] != threading.main_thread().name


def test_abstract_methods_are_exactly_the_four_sync_operations():
    assert BaseStateBackend.__abstractmethods__ == {"get", "set", "delete", "clear"}


BROKEN_BACKENDS = {
    # Ignores the map index: the bug AIP-103's schema exists to prevent.
    "ignores_map_index": "return (scope.dag_id, scope.run_id, scope.task_id) if TASK else scope",
    # Ignores the run: state leaks from one dag run into the next.
    "ignores_run": "return (scope.dag_id, scope.task_id, scope.map_index) if TASK else scope",
}


@pytest.mark.parametrize("bug", sorted(BROKEN_BACKENDS))
def test_kit_catches_isolation_bugs(pytester, bug):
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            import pytest
            from airflow_shared.state.testing import MemoryStateBackend
            from airflow_shared.state import TaskScope
            from airflow_shared.state.testing import StateBackendConformance

            class Broken(MemoryStateBackend):
                def _key(self, scope):
                    {BROKEN_BACKENDS[bug].replace("TASK", "isinstance(scope, TaskScope)")}
                def get(self, scope, key, *, session=None):
                    super().get(scope, key)
                    return self._data.get((self._key(scope), key))
                def set(self, scope, key, value, *, session=None):
                    super().set(scope, key, value)
                    self._data[(self._key(scope), key)] = value

            class TestBroken(StateBackendConformance):
                @pytest.fixture
                def backend(self):
                    return Broken()
            """
        )
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()


# Keys task state on (dag, run, task, map index) only, like the Redis backend once did: a dag run
# deleted and created again with the same run_id reads the deleted run's state.
IGNORES_DAG_RUN_UID = """
import dataclasses

import pytest
from airflow_shared.state.testing import MemoryStateBackend
from airflow_shared.state import TaskScope
from airflow_shared.state.testing import StateBackendConformance


def forget_uid(scope):
    if isinstance(scope, TaskScope) and scope.dag_run_uid is not None:
        return dataclasses.replace(scope, dag_run_uid="always-the-same")
    return scope


class IgnoresDagRunUid(MemoryStateBackend):
    def get(self, scope, key, *, session=None):
        return super().get(forget_uid(scope), key)

    def set(self, scope, key, value, *, session=None):
        super().set(forget_uid(scope), key, value)

    def set_by_try(self, scope, key, value, *, try_number, session=None):
        super().set_by_try(forget_uid(scope), key, value, try_number=try_number)

    def write(self, scope, key, value, **options):
        return super().write(forget_uid(scope), key, value, **options)

    def get_versioned(self, scope, key, *, session=None):
        return super().get_versioned(forget_uid(scope), key)

    def increment(self, scope, key, by=1, **options):
        return super().increment(forget_uid(scope), key, by, **options)

    def entries(self, scope, **listing):
        return super().entries(forget_uid(scope), **listing)

    def get_entry(self, scope, key, *, session=None):
        return super().get_entry(forget_uid(scope), key)

    def delete(self, scope, key, *, session=None):
        super().delete(forget_uid(scope), key)

    def keys(self, scope, *, session=None):
        return super().keys(forget_uid(scope))

    def clear(self, scope, *, all_map_indices=False, session=None):
        super().clear(forget_uid(scope), all_map_indices=all_map_indices)

    def get_many(self, scope, keys, *, session=None):
        return super().get_many(forget_uid(scope), keys)

    def set_many(self, scope, values, **options):
        return super().set_many(forget_uid(scope), values, **options)

    def delete_many(self, scope, keys, *, session=None):
        super().delete_many(forget_uid(scope), keys)


class TestIgnoresDagRunUid(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        return IgnoresDagRunUid()
"""


def test_kit_catches_a_backend_that_ignores_the_dag_run_incarnation(pytester):
    pytester.makepyfile(IGNORES_DAG_RUN_UID)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rf")
    failed = {
        line.split("::")[-1].split(" ")[0] for line in result.stdout.lines if line.startswith("FAILED ")
    }
    # Exactly the tests about re-created runs and incarnations fail; everything else still passes,
    # so the failures are caused by the ignored uid and nothing else.
    assert failed == {
        "test_a_recreated_dag_run_starts_empty_and_can_be_written",
        "test_scopes_differing_only_by_dag_run_uid_are_isolated",
    }, result.stdout.str()


class VersionsWithoutNativeIncrement(MemoryStateBackend):
    """Versions but no increment of its own: the base class's compare-and-set loop serves it."""

    supports_increment = False
    increment = BaseStateBackend.increment


class TestDefaultIncrementConforms(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        return VersionsWithoutNativeIncrement()


class OnlyTheFourMethods(BaseStateBackend):
    """No capability at all: the kit checks that it refuses each one, and passes it."""

    def __init__(self) -> None:
        self._inner = MemoryStateBackend()

    def get(self, scope, key, *, session=None):
        return self._inner.get(scope, key)

    def set(self, scope, key, value, *, session=None):
        self._inner.set(scope, key, value)

    def delete(self, scope, key, *, session=None):
        self._inner.delete(scope, key)

    def clear(self, scope, *, all_map_indices=False, session=None):
        self._inner.clear(scope, all_map_indices=all_map_indices)


class TestBackendWithoutCapabilitiesConforms(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        return OnlyTheFourMethods()


# Each a MemoryStateBackend with one capability broken the way real backends get it wrong, and the
# kit tests that must catch it (each of them has to fail).
CAPABILITY_BUGS = {
    "increment_not_atomic": (
        """
        def increment(self, scope, key, by=1, **options):
            stored = self.get(scope, key)
            time.sleep(0.0005)  # another thread gets in between the read and the write
            result = int(stored or 0) + by
            self.set(scope, key, str(result))
            return result
        """,
        {"test_concurrent_increments_lose_nothing"},
    ),
    "returns_expired_keys": (
        """
        def get_versioned(self, scope, key, *, session=None):
            entry = self._data.get((scope, key))  # expires_at never looked at
            return None if entry is None else VersionedValue(entry.value, entry.version)
        """,
        {"test_expired_keys_are_invisible_to_every_read"},
    ),
    "ignores_if_version": (
        """
        def write(self, scope, key, value, *, if_version=None, **options):
            return super().write(scope, key, value, **options)
        """,
        {"test_if_version_writes_only_over_the_version_read"},
    ),
    "compare_and_set_not_atomic": (
        """
        def write(self, scope, key, value, *, if_version=None, **options):
            if if_version is not None:
                stored = self.get_versioned(scope, key)
                if (stored.version if stored else 0) != if_version:
                    raise StateConflictError(key, if_version, stored.version if stored else 0)
                time.sleep(0.001)  # checked, then written: another writer gets in between
            return super().write(scope, key, value, **options)
        """,
        {
            "test_concurrent_if_version_writers_exactly_one_wins_each_round",
            "test_concurrent_compare_and_set_appends_lose_nothing",
        },
    ),
    "silently_drops_expiry": (
        """
        supports_expiry = False

        def write(self, scope, key, value, *, expires_at=None, **options):
            return super().write(scope, key, value, **options)  # the expiry is quietly lost
        """,
        {"test_without_expiry_expiring_writes_are_refused"},
    ),
    "dry_run_removes": (
        """
        def cleanup(self, *, dry_run=False, **options):
            return super().cleanup(**options)
        """,
        {"test_cleanup_removes_only_expired_keys_and_dry_run_nothing"},
    ),
    "increment_overwrites_text": (
        """
        def increment(self, scope, key, by=1, **options):
            stored = self.get(scope, key)
            result = (int(stored) if (stored or "").lstrip("-").isdigit() else 0) + by
            self.set(scope, key, str(result))
            return result
        """,
        {"test_increment_refuses_a_value_that_is_not_an_integer"},
    ),
    "version_survives_delete": (
        """
        def delete(self, scope, key, *, session=None):
            super().write(scope, key, "", expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        """,
        {"test_a_deleted_or_cleared_key_starts_again_at_version_1"},
    ),
}


@pytest.mark.parametrize("bug", sorted(CAPABILITY_BUGS))
def test_kit_catches_capability_bugs(pytester, bug):
    code, must_fail = CAPABILITY_BUGS[bug]
    pytester.makepyfile(
        textwrap.dedent(
            """
            import time
            from datetime import UTC, datetime

            import pytest
            from airflow_shared.state import StateConflictError, VersionedValue
            from airflow_shared.state.testing import MemoryStateBackend, StateBackendConformance

            class Broken(MemoryStateBackend):
            {code}

            class TestBroken(StateBackendConformance):
                records_writes = True
                records_asset_writers = True

                @pytest.fixture
                def backend(self):
                    return Broken()
            """
        ).format(code=textwrap.indent(textwrap.dedent(code), "    "))
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rf", "-k", " or ".join(sorted(must_fail)))
    failed = {
        line.split("::")[-1].split(" ")[0].split("[")[0]
        for line in result.stdout.lines
        if line.startswith("FAILED ")
    }
    assert must_fail <= failed, result.stdout.str()


TORN_BATCHES = """
import time

import pytest
from airflow_shared.state import BaseStateBackend, validate_many_values
from airflow_shared.state.testing import MemoryStateBackend, StateBackendConformance


class ClaimsAtomicBatches(MemoryStateBackend):
    # Declares atomic batches but writes and reads them one key at a time, as the defaults do.
    get_many = BaseStateBackend.get_many
    delete_many = BaseStateBackend.delete_many

    def set_many(self, scope, values, **options):
        versions = {}
        for key, value in validate_many_values(values).items():
            versions[key] = self.write(scope, key, value, **options)
            time.sleep(0.0005)  # a round trip per key: readers get in between
        return versions


class TestClaimsAtomicBatches(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        return ClaimsAtomicBatches()
"""


def test_kit_catches_a_backend_that_declares_atomic_batches_but_applies_them_key_by_key(pytester):
    pytester.makepyfile(TORN_BATCHES)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rf", "-k", "many or batch")
    failed = {
        line.split("::")[-1].split(" ")[0] for line in result.stdout.lines if line.startswith("FAILED ")
    }
    assert failed == {"test_atomic_batches_are_never_seen_half_applied"}, result.stdout.str()


def test_default_batches_are_built_on_the_single_key_methods():
    calls = []

    class Counting(OnlyTheFourMethods):
        def get(self, scope, key, *, session=None):
            calls.append(("get", key))
            return super().get(scope, key, session=session)

        def set(self, scope, key, value, *, session=None):
            calls.append(("set", key))
            super().set(scope, key, value, session=session)

        def delete(self, scope, key, *, session=None):
            calls.append(("delete", key))
            super().delete(scope, key, session=session)

    backend = Counting()
    scope = AssetScope(1)
    assert backend.set_many(scope, {"a": "1", "b": "2"}) == {"a": None, "b": None}
    assert backend.get_many(scope, ["a", "b", "a"]) == {"a": "1", "b": "2"}
    backend.delete_many(scope, ["b"])
    assert calls == [("set", "a"), ("set", "b"), ("get", "a"), ("get", "b"), ("delete", "b")]
    assert not backend.supports_atomic_many


WRAPPERS = """
import pytest
from airflow_shared.state import BaseStateBackend, capability_names, contract_methods
from airflow_shared.state.testing import StateBackendWrapperConformance


def passing(name):
    def call(self, *args, **kwargs):
        return getattr(self.wrapped, name)(*args, **kwargs)

    async def acall(self, *args, **kwargs):
        return await getattr(self.wrapped, name)(*args, **kwargs)

    return acall if name.startswith("a") and name[1:] in contract_methods() else call


class Transparent(BaseStateBackend):
    def __init__(self, wrapped):
        self.wrapped = wrapped
        for name in capability_names():
            setattr(self, name, getattr(wrapped, name))


for name in contract_methods():
    setattr(Transparent, name, passing(name))
Transparent.__abstractmethods__ = frozenset()


class ForgetsBatches(Transparent):
    # What a wrapper written before batches existed looks like: the per-key defaults, no flag.
    supports_atomic_many = False
    for name in ("get_many", "set_many", "delete_many", "aget_many", "aset_many", "adelete_many"):
        locals()[name] = getattr(BaseStateBackend, name)

    def __init__(self, wrapped):
        self.wrapped = wrapped


class TestTransparent(StateBackendWrapperConformance):
    @pytest.fixture
    def wrap(self):
        return Transparent


class TestForgetsBatches(StateBackendWrapperConformance):
    @pytest.fixture
    def wrap(self):
        return ForgetsBatches
"""


def test_wrapper_kit_passes_a_transparent_wrapper_and_catches_one_that_forgets_batches(pytester):
    pytester.makepyfile(test_wrappers=WRAPPERS)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rf")
    failed = {line.split(" ")[1].split("[")[0] for line in result.stdout.lines if line.startswith("FAILED ")}
    assert failed == {
        f"test_wrappers.py::TestForgetsBatches::{test}"
        for test in (
            "test_every_contract_method_is_passed_on_by_the_wrapper_class",
            "test_every_capability_reads_as_the_wrapped_backends",
            "test_every_call_is_one_call_of_the_same_method_of_the_wrapped_backend",
        )
    }, result.stdout.str()
