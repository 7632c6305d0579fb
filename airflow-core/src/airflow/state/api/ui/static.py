"""Serves the UI's JavaScript module (filled in by the UI work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/ui")
