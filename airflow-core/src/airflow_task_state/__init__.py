"""
Durable task and asset state for Apache Airflow (AIP-103). docs/architecture.md says what each
folder and module is and where it runs; ``tests/test_import_graph.py`` keeps the imports flowing
one way.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_task_state.airflow_db.run_identity import task_scope as task_scope
    from airflow_task_state.configured_backend import get_state_backend as get_state_backend
    from airflow_task_state.configured_backend import resolve_state_backend as resolve_state_backend
    from airflow_task_state.exceptions import *  # noqa: F403
    from airflow_task_state.protocol import NEVER_EXPIRES as NEVER_EXPIRES
    from airflow_task_state.worker.accessors import asset_state as asset_state
    from airflow_task_state.worker.accessors import task_state as task_state
    from airflow_task_state.worker.options import Versioned as Versioned

# Every name is imported on first use: every Airflow process imports this package at start-up, to
# read its provider info, and one that never touches state must not pay for the rest of it.
_ERRORS = (
    "InvalidStateError",
    "LargeValueCorruptedError",
    "LargeValueError",
    "StateAccessDeniedError",
    "StateConfigurationError",
    "StateConflictError",
    "StateError",
    "StateOutcomeUnknownError",
    "StateUnavailableError",
    "StateUnsupportedError",
)
_LAZY = {
    "NEVER_EXPIRES": "airflow_task_state.protocol",
    "Versioned": "airflow_task_state.worker.options",
    "get_state_backend": "airflow_task_state.configured_backend",
    "resolve_state_backend": "airflow_task_state.configured_backend",
    "task_state": "airflow_task_state.worker.accessors",
    "asset_state": "airflow_task_state.worker.accessors",
    "task_scope": "airflow_task_state.airflow_db.run_identity",
    **dict.fromkeys(_ERRORS, "airflow_task_state.exceptions"),
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
