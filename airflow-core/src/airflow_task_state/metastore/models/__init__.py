"""ORM models of the state tables, on their own MetaData."""

from __future__ import annotations

from airflow_task_state.metastore.models.asset_state import AssetStateModel
from airflow_task_state.metastore.models.base import metadata
from airflow_task_state.metastore.models.task_state import TaskStateModel

__all__ = ["AssetStateModel", "TaskStateModel", "metadata"]
