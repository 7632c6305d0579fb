"""
Durable task and asset state for Apache Airflow (AIP-103).

Folders say who runs the code: ``worker/`` runs in task processes (the accessors, the HTTP
client, the resumable-job mixin; it imports neither FastAPI nor the ORM), ``api/`` on the API
server (the state API, the handshake and the credentials it issues, the keys only API servers
hold, the operators' REST API in ``api/operator/``, the UI module in ``api/ui/``, and the plugin
that mounts it all), ``metastore/`` is the default storage (the backend, its SQL and engine,
models, migrations, DB manager), ``cli/`` the ``airflow state`` and ``airflow state-db``
commands; ``manage`` is what operators do to state, shared by the REST API and the CLI.
The other modules beside this file are the floor both sides share: ``protocol`` (paths and
error reasons, the handshake's proof), ``codec`` (values as JSON text), ``configured_backend``, ``config``
(every setting read, defaults in ``provider_info``) and ``exceptions`` (``StateError`` and its
subclasses, exported here).

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
    from airflow.state.configured_backend import get_state_backend, resolve_state_backend
    from airflow.state.metastore.run_identity import task_scope
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
        from airflow.state.metastore import run_identity

        return run_identity.task_scope
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
