"""The operators' REST API: task state and asset state, under ``/api/v1`` of the state app."""

from __future__ import annotations

from airflow.state.api.operator.asset_routes import router as asset_router
from airflow.state.api.operator.task_routes import router as task_router
from fastapi import APIRouter

router = APIRouter(prefix="/api/v1")
router.include_router(task_router)
router.include_router(asset_router)
