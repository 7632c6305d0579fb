"""
Writes that count only if the try succeeds, on the Redis backend: the same task code as the
metastore's in-process tests (airflow-core/tests/test_staged_writes.py), its commit applied by Redis.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from airflow_shared.state import COMMIT_KEY, AssetScope, StagedCommit, StagedOp, StagedWrite
from airflow_task_state import get_state_backend, task_scope
from airflow_task_state.configured_backend import reset_state_backend
from sqlalchemy import select
from state_testing.airflow_cli import run_airflow

# What is proven here is Redis's, whatever the metadata database: the SQLite pass only.
pytestmark = pytest.mark.any_database

DAGS = Path(__file__).parents[1] / "airflow-core" / "tests" / "dags"


@pytest.fixture
def redis_configured(monkeypatch, redis_url):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "airflow_state_redis.RedisStateBackend")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", redis_url)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(DAGS))
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    reset_state_backend()
    run_airflow("dags", "reserialize")
    yield get_state_backend()
    reset_state_backend()


def _latest(dag_id: str, task_id: str):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
            .order_by(TaskInstance.start_date.desc())
        ).first()
        return str(ti.id), task_scope(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)


def _asset(name: str) -> AssetScope:
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return AssetScope(session.scalar(select(AssetModel.id).where(AssetModel.name == name)))


def test_staged_writes_on_redis_apply_once_and_only_for_the_try_that_succeeds(redis_configured):
    backend = redis_configured
    output = run_airflow("dags", "test", "state_staged_writes").stdout
    marker = "Done. Returned value was: "
    [line] = [line for line in output.splitlines() if marker in line and "'try': 2" in line]
    out = ast.literal_eval(line.split(marker, 1)[1].rsplit(" [airflow", 1)[0])
    ti_id, task = _latest("state_staged_writes", "advance")
    asset = _asset("state_tests_staged")
    before = out["at_start"]["runs"]
    assert out["reads"]["runs"] == before + 3
    assert backend.get(asset, "watermark") == '"through try 2"'
    assert int(backend.get(asset, "runs")) == before + 3
    assert backend.get(task, "staged_by_try_2") == '{"try":2}'
    assert backend.get(task, "staged_by_try_1") is None
    assert backend.get(task, "doomed") is None
    assert backend.get(task, COMMIT_KEY) is None  # recorded apart from the task's state
    # The try's commit, sent again after its task state was cleared (clear on success does that),
    # still finds itself applied: the asset's counter moves once.
    backend.clear(task)
    again = StagedCommit(ti_id, task, (StagedWrite(asset, "runs", StagedOp.INCREMENT, by=5),))
    assert backend.apply_commit(again) is False
    assert int(backend.get(asset, "runs")) == before + 3

    # A try that fails applies none of it.
    result = run_airflow("dags", "test", "state_staged_failure", check=False)
    assert "fail after staging" in result.stdout + result.stderr
    assert int(backend.get(asset, "runs")) == before + 3
    assert backend.get(asset, "watermark") == '"through try 2"'
    assert backend.keys(_latest("state_staged_failure", "stage_then_fail")[1]) == []
