"""
Durable task and asset state for Apache Airflow (AIP-103).

Folders say who runs the code: ``worker/`` runs in task processes (the accessors, the HTTP
client, the resumable-job mixin; it imports neither FastAPI nor the ORM), ``api/`` on the API
server (the task API and its handshake, the operators' REST API in ``api/operator/``, the UI in
``api/ui/``), ``cli/`` the ``airflow state`` and ``airflow state-db`` commands. ``metastore/`` is
the default storage, one backend among others; ``airflow_db/`` is Airflow's own metadata database
as the rest reads it (its engine, a dag run's identity). ``manage`` is what operators do to state,
shared by the REST API and the CLI; ``plugin`` wires the API server and task processes together.
The other modules beside this file are the floor every part shares: ``protocol`` (paths and error
reasons, the handshake's proof), ``codec`` (values as JSON text), ``expiry``, ``configured_backend``,
``config`` (every setting read, defaults in ``provider_info``) and ``exceptions``.
``tests/test_import_graph.py`` keeps the imports flowing one way.

Heavy imports happen on first use: Airflow imports this package while it is still starting up
(provider discovery), and task processes should not pay for the ORM they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.state.exceptions import (
    InvalidStateError,
    StateAccessDeniedError,
    StateConfigurationError,
    StateConflictError,
    StateError,
    StateUnavailableError,
    StateUnsupportedError,
)
from airflow.state.protocol import NEVER_EXPIRES
from airflow.state.worker.options import Versioned

if TYPE_CHECKING:
    from airflow.state.airflow_db.run_identity import task_scope
    from airflow.state.configured_backend import get_state_backend, resolve_state_backend
    from airflow.state.worker.accessors import asset_state, task_state

__all__ = [
    "NEVER_EXPIRES",
    "InvalidStateError",
    "StateAccessDeniedError",
    "StateConfigurationError",
    "StateConflictError",
    "StateError",
    "StateUnavailableError",
    "StateUnsupportedError",
    "Versioned",
    "asset_state",
    "get_state_backend",
    "resolve_state_backend",
    "task_scope",
    "task_state",
]


def __getattr__(name: str) -> Any:
    if name in ("get_state_backend", "resolve_state_backend"):
        from airflow.state import configured_backend

        return getattr(configured_backend, name)
    if name in ("task_state", "asset_state"):
        from airflow.state.worker import accessors

        return getattr(accessors, name)
    if name == "task_scope":
        from airflow.state.airflow_db import run_identity

        return run_identity.task_scope
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
