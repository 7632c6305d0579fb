"""A commit is checked whole when it is built, before it reaches any backend."""

from __future__ import annotations

import re

import pytest
from airflow_shared.state import (
    COMMIT_KEY,
    COMMIT_RECORDS_TASK_ID,
    StagedCommit,
    StagedOp,
    StagedWrite,
    TaskScope,
    commit_records_scope,
    is_commit_records_scope,
)

LEDGER = TaskScope("dag", "run", "task", dag_run_uid="uid-1")


def test_a_commit_is_checked_whole_before_it_reaches_the_backend():
    twice = [StagedWrite(LEDGER, "k", StagedOp.SET, "1"), StagedWrite(LEDGER, "k", StagedOp.DELETE)]
    with pytest.raises(ValueError, match="twice"):
        StagedCommit("commit-1", LEDGER, twice)
    with pytest.raises(ValueError, match="is reserved"):
        StagedCommit("commit-1", LEDGER, [StagedWrite(LEDGER, COMMIT_KEY, StagedOp.SET, "1")])
    with pytest.raises(TypeError):
        StagedWrite(LEDGER, "k", StagedOp.SET, None)
    with pytest.raises(ValueError, match="no value"):
        StagedWrite(LEDGER, "k", StagedOp.DELETE, "1")
    with pytest.raises(ValueError, match="commit_id"):
        StagedCommit("", LEDGER, ())


def test_a_commit_records_itself_where_no_task_instance_can_reach():
    commit = StagedCommit("ti-uuid-1", LEDGER, [StagedWrite(LEDGER, "k", StagedOp.SET, "1")])
    # One scope per dag run (its incarnation too), with a task id Airflow refuses (^[\w.-]+$).
    assert commit.record_scope == TaskScope("dag", "run", COMMIT_RECORDS_TASK_ID, -1, dag_run_uid="uid-1")
    assert not re.fullmatch(r"[\w.-]+", COMMIT_RECORDS_TASK_ID)
    assert is_commit_records_scope(commit.record_scope) and not is_commit_records_scope(LEDGER)
    mapped = TaskScope("dag", "run", "task", 3, dag_run_uid="uid-1")
    assert commit_records_scope(mapped) == commit.record_scope
    with pytest.raises(ValueError, match="where commits record themselves"):
        StagedCommit("ti-uuid-1", LEDGER, [StagedWrite(commit.record_scope, "ti-uuid-2", StagedOp.DELETE)])
    with pytest.raises(ValueError, match="not its records"):
        StagedCommit("ti-uuid-1", commit.record_scope, [])
    with pytest.raises(ValueError, match="NUL"):
        StagedCommit("ti\x00", LEDGER, [])
