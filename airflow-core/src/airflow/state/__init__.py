"""
Durable task and asset state for Apache Airflow (AIP-103).

Heavy imports happen on first use: Airflow imports this package while it is still starting up
(provider discovery), and task processes should not pay for the ORM they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.state.accessors import asset_state, task_state
    from airflow.state.backend import get_state_backend, resolve_state_backend
    from airflow.state.run_identity import task_scope

__all__ = ["asset_state", "get_state_backend", "resolve_state_backend", "task_scope", "task_state"]


def __getattr__(name: str) -> Any:
    if name in ("get_state_backend", "resolve_state_backend"):
        from airflow.state import backend

        return getattr(backend, name)
    if name in ("task_state", "asset_state"):
        from airflow.state import accessors

        return getattr(accessors, name)
    if name == "task_scope":
        from airflow.state import run_identity

        return run_identity.task_scope
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
