"""A commit is checked whole when it is built, before it reaches any backend."""

from __future__ import annotations

import pytest
from airflow_shared.state import COMMIT_KEY, StagedCommit, StagedOp, StagedWrite, TaskScope

LEDGER = TaskScope("dag", "run", "task", dag_run_uid="uid-1")


def test_a_commit_is_checked_whole_before_it_reaches_the_backend():
    twice = [StagedWrite(LEDGER, "k", StagedOp.SET, "1"), StagedWrite(LEDGER, "k", StagedOp.DELETE)]
    with pytest.raises(ValueError, match="twice"):
        StagedCommit("commit-1", LEDGER, twice)
    with pytest.raises(ValueError, match="records itself"):
        StagedCommit("commit-1", LEDGER, [StagedWrite(LEDGER, COMMIT_KEY, StagedOp.SET, "1")])
    with pytest.raises(TypeError):
        StagedWrite(LEDGER, "k", StagedOp.SET, None)
    with pytest.raises(ValueError, match="no value"):
        StagedWrite(LEDGER, "k", StagedOp.DELETE, "1")
    with pytest.raises(ValueError, match="commit_id"):
        StagedCommit("", LEDGER, ())
