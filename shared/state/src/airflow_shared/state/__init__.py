"""
Scopes and the abstract backend for Airflow task and asset state (AIP-103).

This distribution depends on nothing and never imports ``airflow``, so a provider can write a
backend without installing Airflow's core.
"""

from __future__ import annotations

from .backend import BaseStateBackend
from .entries import StateEntry, StateEntryPage, validate_listing
from .scopes import AssetScope, StateScope, TaskScope
from .validation import MAX_KEY_LENGTH, validate_key, validate_scope, validate_value

__all__ = [
    "MAX_KEY_LENGTH",
    "AssetScope",
    "BaseStateBackend",
    "StateEntry",
    "StateEntryPage",
    "StateScope",
    "TaskScope",
    "validate_key",
    "validate_listing",
    "validate_scope",
    "validate_value",
]
