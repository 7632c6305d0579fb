"""
Durable task and asset state for Apache Airflow (AIP-103). docs/architecture.md says what each
folder and module is and where it runs; ``tests/test_import_graph.py`` keeps the imports flowing
one way.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_task_state import exceptions
from airflow_task_state.exceptions import *  # noqa: F403 (the errors, as exceptions.__all__ lists them)
from airflow_task_state.protocol import NEVER_EXPIRES
from airflow_task_state.worker.options import Versioned

if TYPE_CHECKING:
    from airflow_task_state.airflow_db.run_identity import task_scope as task_scope
    from airflow_task_state.configured_backend import get_state_backend as get_state_backend
    from airflow_task_state.configured_backend import resolve_state_backend as resolve_state_backend
    from airflow_task_state.worker.accessors import asset_state as asset_state
    from airflow_task_state.worker.accessors import task_state as task_state

# Imported on first use, not here: Airflow imports this package while it is still starting up
# (provider discovery), and task processes should not pay for the ORM they do not use.
_LAZY = {
    "get_state_backend": "airflow_task_state.configured_backend",
    "resolve_state_backend": "airflow_task_state.configured_backend",
    "task_state": "airflow_task_state.worker.accessors",
    "asset_state": "airflow_task_state.worker.accessors",
    "task_scope": "airflow_task_state.airflow_db.run_identity",
}

__all__ = ["NEVER_EXPIRES", "Versioned", *_LAZY]
__all__ += exceptions.__all__


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
