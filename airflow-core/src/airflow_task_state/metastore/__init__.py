"""
The default storage: state in the Airflow metadata database. On Airflow 3.3, in Airflow's own
state-store tables, with what they lack beside them (:mod:`.beside_airflow33`); on 3.2 in this
package's tables (see :mod:`airflow_task_state.airflow_line`).

Everything here is imported on first use: this package is also reached while Airflow is still
initialising (the reset hook, through provider discovery), before its ORM can be imported, and in
every Airflow process, most of which never touch state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import MetaData

    from airflow_task_state.metastore.backend import MetastoreStateBackend

__all__ = ["MetastoreStateBackend", "state_tables"]


def __getattr__(name: str) -> Any:
    if name != "MetastoreStateBackend":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

    # The class for this Airflow's tables.
    if AIRFLOW_HAS_STATE_STORE:
        from airflow_task_state.metastore.beside_airflow33.backend import Airflow33MetastoreBackend

        return Airflow33MetastoreBackend
    from airflow_task_state.metastore.backend import MetastoreStateBackend

    return MetastoreStateBackend


def state_tables() -> MetaData:
    """This package's tables on this Airflow: what ``airflow db migrate`` creates and checks."""
    from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

    if AIRFLOW_HAS_STATE_STORE:
        from airflow_task_state.metastore.beside_airflow33.models import metadata

        return metadata
    from airflow_task_state.metastore.models import metadata as own_tables

    return own_tables
