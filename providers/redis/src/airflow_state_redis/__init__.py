"""A Redis backend for Airflow task and asset state (AIP-103); Airflow is not needed to import or use it."""

from __future__ import annotations

from ._errors import RedisStateConnectionError, StateNotReplicatedError
from .backend import RedisStateBackend

__all__ = ["RedisStateBackend", "RedisStateConnectionError", "StateNotReplicatedError"]
