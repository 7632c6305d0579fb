"""ORM models of the state tables, on their own MetaData."""

from __future__ import annotations

from airflow.state.models.asset_state import AssetStateModel
from airflow.state.models.base import metadata
from airflow.state.models.task_state import TaskStateModel

__all__ = ["AssetStateModel", "TaskStateModel", "metadata"]
