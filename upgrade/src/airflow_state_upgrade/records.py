"""
Rows of ours that are bookkeeping, not state: the records of committed staged writes, which make a
retried commit count once. Airflow 3.3 has no staged writes, so the command leaves them behind.

The names are the contract's (``airflow_shared.state``), written out: this distribution installs
beside Airflow 3.3, without the contract (upgrade/tests checks that they agree).
"""

from __future__ import annotations

#: The task id of each dag run's commit records (keyed by commit id): one Airflow refuses in a DAG.
COMMIT_RECORDS_TASK_ID = "airflow:staged-commits"
#: Where releases up to 0.7 recorded a commit: this key of the committing task instance's scope.
COMMIT_KEY = "airflow.staged_commit"


def is_commit_record(task_id: str, key: str) -> bool:
    """Whether a ``task_state`` row with this task id and key records a commit."""
    return task_id == COMMIT_RECORDS_TASK_ID or key == COMMIT_KEY
