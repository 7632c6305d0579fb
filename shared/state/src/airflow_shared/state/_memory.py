"""
A dict-backed reference backend, the smallest correct implementation of the contract: a worked
example and a stand-in for tests (import it from :mod:`airflow_shared.state.testing`). It keeps
state in this process only: never configure it as ``[state] backend`` of a deployment.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .backend import BaseStateBackend
from .entries import StateEntry, StateEntryPage, page_of_keys, validate_listing
from .many import validate_many_keys, validate_many_values
from .scopes import StateScope, TaskScope
from .staged import is_commit_records_scope
from .validation import validate_key, validate_scope, validate_value
from .writes import (
    StateConflictError,
    StateWriter,
    VersionedValue,
    incremented,
    validate_cleanup,
    validate_increment,
    validate_write,
)


def _check(scope: object) -> None:
    validate_scope(scope)
    # A dict is not told when a dag run is deleted, so the run's incarnation must be in the key.
    if isinstance(scope, TaskScope) and scope.dag_run_uid is None:
        raise ValueError(
            "MemoryStateBackend needs TaskScope.dag_run_uid (the dag run's incarnation); build the "
            "scope with airflow_task_state.task_scope(dag_id, run_id, task_id, map_index)"
        )


def _live(entry: StateEntry | None, now: datetime) -> StateEntry | None:
    """*entry* unless it has expired: an expired key is gone for every read, cleaned up or not."""
    if entry is None or (entry.expires_at is not None and entry.expires_at <= now):
        return None
    return entry


class MemoryStateBackend(BaseStateBackend):
    """Task and asset state in a dict of this process, safe to share between threads."""

    supports_versions = True
    supports_expiry = True
    supports_increment = True
    supports_atomic_many = True

    def __init__(self) -> None:
        # Every stored key, expired ones included until cleanup() removes them: the version of an
        # expired key that is written again continues from the old one, as in the metastore.
        self._data: dict[tuple[StateScope, str], StateEntry] = {}
        # One lock makes each read-check-write (if_version, increment) a single atomic step.
        self._lock = threading.Lock()

    # --- reads -------------------------------------------------------------------------------

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        stored = self.get_versioned(scope, key)
        return None if stored is None else stored.value

    def get_versioned(self, scope: StateScope, key: str, *, session: Any = None) -> VersionedValue | None:
        entry = self._read(scope, key)
        return None if entry is None else VersionedValue(entry.value, entry.version or 0)

    def get_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> dict[str, str]:
        _check(scope)
        wanted = validate_many_keys(keys, "get_many")
        now = datetime.now(UTC)
        with self._lock:  # one lock hold: a batch written meanwhile is seen whole or not at all
            found = {key: _live(self._data.get((scope, key)), now) for key in wanted}
        return {key: entry.value for key, entry in found.items() if entry is not None}

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        _check(scope)
        return sorted(self._live_entries(scope))

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> StateEntryPage:
        _check(scope)
        validate_listing(key_prefix, offset, limit)
        stored = self._live_entries(scope)
        keys, total = page_of_keys(list(stored), key_prefix, offset, limit)
        return StateEntryPage([stored[key] for key in keys], total)

    def get_entry(self, scope: StateScope, key: str, *, session: Any = None) -> StateEntry | None:
        return self._read(scope, key)

    def _read(self, scope: StateScope, key: str) -> StateEntry | None:
        _check(scope)
        validate_key(key)
        return self._live_entry(scope, key)

    def _live_entry(self, scope: StateScope, key: str) -> StateEntry | None:
        return _live(self._data.get((scope, key)), datetime.now(UTC))

    def _live_entries(self, scope: StateScope) -> dict[str, StateEntry]:
        now = datetime.now(UTC)
        # Under the lock: iterating a dict that another thread is growing raises RuntimeError.
        with self._lock:
            return {
                key: entry
                for (stored_scope, key), entry in self._data.items()
                if stored_scope == scope and _live(entry, now) is not None
            }

    # --- writes ------------------------------------------------------------------------------

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        self.write(scope, key, value)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        _check(scope)
        validate_key(key)
        validate_value(value)
        with self._lock:
            self._store(scope, {key: value}, try_number, None, None)

    def write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int | None:
        _check(scope)
        validate_key(key)
        validate_value(value)
        try_number = validate_write(writer, expires_at, if_version)
        with self._lock:
            live = self._live_entry(scope, key)
            if if_version is not None and (stored := 0 if live is None else live.version or 0) != if_version:
                raise StateConflictError(key, if_version, stored)
            return self._store(scope, {key: value}, try_number, writer, expires_at)[key]

    def set_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> dict[str, int | None]:
        _check(scope)
        checked = validate_many_values(values)
        try_number = validate_write(writer, expires_at)
        with self._lock:
            return self._store(scope, checked, try_number, writer, expires_at)

    def increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        _check(scope)
        validate_key(key)
        validate_increment(by)
        try_number = validate_write(writer, expires_at)
        with self._lock:
            live = self._live_entry(scope, key)
            # Raises ValueError before anything is stored when the value is not a 64-bit integer.
            result = incremented(key, None if live is None else live.value, by)
            self._store(scope, {key: str(result)}, try_number, writer, expires_at)
        return result

    def _store(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        try_number: int | None,
        writer: StateWriter | None,
        expires_at: datetime | None,
    ) -> dict[str, int | None]:
        """Store *values* (the caller holds the lock); return each key's new version."""
        is_task = isinstance(scope, TaskScope)
        versions: dict[str, int | None] = {}
        for key, value in values.items():
            previous = self._data.get((scope, key))
            versions[key] = version = 1 if previous is None else (previous.version or 0) + 1
            self._data[(scope, key)] = StateEntry(
                key,
                value,
                updated_at=datetime.now(UTC),
                # Task state records the try; asset state the whole writer.
                updated_by_try=try_number if is_task else None,
                version=version,
                expires_at=expires_at,
                writer=None if is_task else writer,
            )
        return versions

    # --- removal -----------------------------------------------------------------------------

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        _check(scope)
        validate_key(key)
        with self._lock:
            # Gone for good: a key written again after a delete starts at version 1.
            self._data.pop((scope, key), None)

    def delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> None:
        _check(scope)
        doomed = validate_many_keys(keys, "delete_many")
        with self._lock:
            for key in doomed:
                self._data.pop((scope, key), None)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _check(scope)
        with self._lock:
            for slot in list(self._data):
                stored = slot[0]
                if all_map_indices and isinstance(scope, TaskScope) and isinstance(stored, TaskScope):
                    stored = dataclasses.replace(stored, map_index=scope.map_index)
                if stored == scope:
                    del self._data[slot]

    def cleanup(
        self,
        *,
        now: datetime,
        updated_before: datetime | None = None,
        batch_size: int = 1000,
        dry_run: bool = False,
        session: Any = None,
    ) -> int:
        validate_cleanup(now, updated_before, batch_size)

        def removable(scope: StateScope, entry: StateEntry) -> bool:
            if entry.expires_at is not None and entry.expires_at <= now:
                return True
            # Commit records go only as they expire: exactly-once must not depend on a clean-up.
            return (
                updated_before is not None
                and entry.updated_at is not None
                and entry.updated_at < updated_before
                and not is_commit_records_scope(scope)
            )

        with self._lock:
            doomed = [(slot, entry) for slot, entry in self._data.items() if removable(slot[0], entry)]
        if dry_run:
            return len(doomed)
        removed = 0
        # One batch per lock hold, so readers and writers get in between batches, as a database
        # backend's short transactions let them.
        for start in range(0, len(doomed), batch_size):
            with self._lock:
                for slot, seen in doomed[start : start + batch_size]:
                    # Only if untouched since it was picked: a key written meanwhile is live again.
                    if self._data.get(slot) is seen:
                        del self._data[slot]
                        removed += 1
        return removed
