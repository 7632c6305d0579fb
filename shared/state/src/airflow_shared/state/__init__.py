"""
Scopes and the abstract backend for Airflow task and asset state (AIP-103).

This distribution depends on nothing and never imports ``airflow``, so a provider can write a
backend without installing Airflow's core.
"""

from __future__ import annotations

from .backend import BaseStateBackend, capability_names, commit_record, contract_methods, validate_discard
from .entries import StateEntry, StateEntryPage, validate_listing
from .many import MAX_MANY_KEYS, validate_batch_size, validate_many_keys, validate_many_values
from .scopes import AssetScope, StateScope, TaskScope, dag_run_uid
from .staged import (
    COMMIT_KEY,
    COMMIT_RECORD_SECONDS,
    COMMIT_RECORDS_TASK_ID,
    StagedCommit,
    StagedOp,
    StagedWrite,
    commit_records_scope,
    is_commit_records_scope,
)
from .validation import MAX_KEY_LENGTH, validate_key, validate_scope, validate_value
from .writes import (
    API_WRITER,
    CLI_WRITER,
    MAX_COUNTER,
    MIN_COUNTER,
    StateCapabilityError,
    StateConflictError,
    StateWriter,
    VersionedValue,
    WriterKind,
    counter_value,
    incremented,
    validate_cleanup,
    validate_increment,
    validate_write,
    validate_write_options,
    validate_writer,
)

__all__ = [
    "API_WRITER",
    "CLI_WRITER",
    "COMMIT_KEY",
    "COMMIT_RECORDS_TASK_ID",
    "COMMIT_RECORD_SECONDS",
    "MAX_COUNTER",
    "MAX_KEY_LENGTH",
    "MAX_MANY_KEYS",
    "MIN_COUNTER",
    "AssetScope",
    "BaseStateBackend",
    "StagedCommit",
    "StagedOp",
    "StagedWrite",
    "StateCapabilityError",
    "StateConflictError",
    "StateEntry",
    "StateEntryPage",
    "StateScope",
    "StateWriter",
    "TaskScope",
    "VersionedValue",
    "WriterKind",
    "capability_names",
    "commit_record",
    "commit_records_scope",
    "contract_methods",
    "counter_value",
    "dag_run_uid",
    "incremented",
    "is_commit_records_scope",
    "validate_batch_size",
    "validate_cleanup",
    "validate_discard",
    "validate_increment",
    "validate_key",
    "validate_listing",
    "validate_many_keys",
    "validate_many_values",
    "validate_scope",
    "validate_value",
    "validate_write",
    "validate_write_options",
    "validate_writer",
]
