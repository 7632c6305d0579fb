"""
A Redis backend for Airflow task and asset state (AIP-103).

Select it with ``[state] backend = airflow_state_redis.RedisStateBackend`` and point it at a server
with ``[state_redis] url``. Built only on ``apache-airflow-shared-state``: Airflow is not needed to
import or use it.
"""

from __future__ import annotations

from ._errors import RedisStateConnectionError, StateNotReplicatedError
from .backend import RedisStateBackend

__all__ = ["RedisStateBackend", "RedisStateConnectionError", "StateNotReplicatedError"]
