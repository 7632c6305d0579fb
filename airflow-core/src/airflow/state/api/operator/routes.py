"""Routes of the operators' REST API (filled in by the operator API work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1")
