"""A Redis backend for Airflow task and asset state (AIP-103); Airflow is not needed to import or use it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._errors import RedisStateConnectionError, StateNotReplicatedError
    from .backend import RedisStateBackend

# Imported on first use: every Airflow process reads this distribution's provider info at start-up,
# and that must not import redis-py where Redis is not the backend.
_LAZY = {
    "RedisStateBackend": ".backend",
    "RedisStateConnectionError": "._errors",
    "StateNotReplicatedError": "._errors",
}

__all__ = ["RedisStateBackend", "RedisStateConnectionError", "StateNotReplicatedError"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
