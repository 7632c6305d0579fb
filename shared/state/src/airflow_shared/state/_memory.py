"""
A dict-backed reference backend: the smallest correct implementation of the contract.

Import it from :mod:`airflow_shared.state.testing`. Backend authors can read it as a worked example
(validation before any I/O, task state keyed on ``dag_run_uid``, ``clear(all_map_indices=True)``),
and use it in their own tests as a stand-in that behaves like a real backend. It keeps state in this
process only: never configure it as ``[state] backend`` of a deployment.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow_shared.state import (
    AssetScope,
    BaseStateBackend,
    StateScope,
    TaskScope,
    validate_key,
    validate_scope,
    validate_value,
)


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
        self._data: dict[tuple[StateScope, str], str] = {}
        self._lock = threading.Lock()

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        _check(scope)
        validate_key(key)
        return self._data.get((scope, key))

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        _check(scope)
        validate_key(key)
        validate_value(value)
        with self._lock:
            self._data[(scope, key)] = value

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
