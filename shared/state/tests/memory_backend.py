"""A dict-backed reference backend: the smallest correct implementation of the contract."""

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


class MemoryStateBackend(BaseStateBackend):
    def __init__(self) -> None:
        self._data: dict[tuple[StateScope, str], str] = {}
        self._lock = threading.Lock()

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        validate_scope(scope)
        validate_key(key)
        return self._data.get((scope, key))

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        validate_scope(scope)
        validate_key(key)
        validate_value(value)
        with self._lock:
            self._data[(scope, key)] = value

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        validate_scope(scope)
        validate_key(key)
        with self._lock:
            self._data.pop((scope, key), None)

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        validate_scope(scope)
        return sorted(key for stored_scope, key in self._data if stored_scope == scope)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        validate_scope(scope)
        with self._lock:
            for stored_scope, key in list(self._data):
                if self._covers(scope, stored_scope, all_map_indices):
                    del self._data[(stored_scope, key)]

    @staticmethod
    def _covers(scope: StateScope, stored: StateScope, all_map_indices: bool) -> bool:
        if isinstance(scope, AssetScope) or not all_map_indices:
            return stored == scope
        return isinstance(stored, TaskScope) and (stored.dag_id, stored.run_id, stored.task_id) == (
            scope.dag_id,
            scope.run_id,
            scope.task_id,
        )
