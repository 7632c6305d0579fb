"""
The default storage: state in the Airflow metadata database.

``MetastoreStateBackend`` is imported on first use: this package is also reached while Airflow is
still initialising (the reset hook, through provider discovery), before its ORM can be imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_task_state.metastore.backend import MetastoreStateBackend

__all__ = ["MetastoreStateBackend"]


def __getattr__(name: str) -> Any:
    if name == "MetastoreStateBackend":  # the one for this Airflow's tables
        from airflow_task_state.airflow_line import metastore_backend

        return metastore_backend()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
