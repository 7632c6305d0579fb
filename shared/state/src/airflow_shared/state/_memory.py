"""
A dict-backed reference backend: the smallest correct implementation of the contract.

Import it from :mod:`airflow_shared.state.testing`. Backend authors can read it as a worked example
(validation before any I/O, task state keyed on ``dag_run_uid``, ``clear(all_map_indices=True)``),
and use it in their own tests as a stand-in that behaves like a real backend. It keeps state in this
process only: never configure it as ``[state] backend`` of a deployment.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from airflow_shared.state import (
    AssetScope,
    BaseStateBackend,
    StateEntry,
    StateEntryPage,
    StateScope,
    TaskScope,
    validate_key,
    validate_listing,
    validate_scope,
    validate_value,
)
from airflow_shared.state.entries import page_of_keys


def _check(scope: object) -> None:
    validate_scope(scope)
    # A dict is not told when a dag run is deleted, so the run's incarnation must be in the key.
    if isinstance(scope, TaskScope) and scope.dag_run_uid is None:
        raise ValueError(
            "MemoryStateBackend needs TaskScope.dag_run_uid (the dag run's incarnation); build the "
            "scope with airflow.state.task_scope(dag_id, run_id, task_id, map_index)"
        )


class MemoryStateBackend(BaseStateBackend):
    """Task and asset state in a dict of this process, safe to share between threads."""

    def __init__(self) -> None:
        self._data: dict[tuple[StateScope, str], StateEntry] = {}
        self._lock = threading.Lock()

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        _check(scope)
        validate_key(key)
        entry = self._data.get((scope, key))
        return None if entry is None else entry.value

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        self.set_by_try(scope, key, value, try_number=None)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        _check(scope)
        validate_key(key)
        validate_value(value)
        writer = try_number if isinstance(scope, TaskScope) else None
        with self._lock:
            self._data[(scope, key)] = StateEntry(key, value, datetime.now(UTC), writer)

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        _check(scope)
        validate_key(key)
        with self._lock:
            self._data.pop((scope, key), None)

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        _check(scope)
        # Under the lock: iterating a dict that another thread is growing raises RuntimeError.
        with self._lock:
            found = [key for stored_scope, key in self._data if stored_scope == scope]
        return sorted(found)

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
        with self._lock:
            stored = {
                key: entry for (stored_scope, key), entry in self._data.items() if stored_scope == scope
            }
        keys, total = page_of_keys(list(stored), key_prefix, offset, limit)
        return StateEntryPage([stored[key] for key in keys], total)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _check(scope)
        with self._lock:
            for stored_scope, key in list(self._data):
                if self._covers(scope, stored_scope, all_map_indices):
                    del self._data[(stored_scope, key)]

    @staticmethod
    def _covers(scope: StateScope, stored: StateScope, all_map_indices: bool) -> bool:
        if isinstance(scope, AssetScope) or not all_map_indices:
            return stored == scope
        return isinstance(stored, TaskScope) and (
            stored.dag_id,
            stored.run_id,
            stored.dag_run_uid,
            stored.task_id,
        ) == (scope.dag_id, scope.run_id, scope.dag_run_uid, scope.task_id)
