"""The upgrade command knows the contract's commit records by the contract's own names."""

from __future__ import annotations

from airflow_shared.state import COMMIT_KEY, COMMIT_RECORDS_TASK_ID, TaskScope, commit_records_scope
from airflow_state_upgrade import records


def test_the_names_are_the_contracts():
    assert records.COMMIT_RECORDS_TASK_ID == COMMIT_RECORDS_TASK_ID
    assert records.COMMIT_KEY == COMMIT_KEY


def test_records_of_every_release_are_recognised_and_state_is_not():
    scope = commit_records_scope(TaskScope("dag", "run", "task", dag_run_uid="1.1"))
    assert records.is_commit_record(scope.task_id, "0190c1d2-any-commit-id")
    assert records.is_commit_record("task", COMMIT_KEY)  # left by a release up to 0.7
    assert not records.is_commit_record("task", "watermark")
