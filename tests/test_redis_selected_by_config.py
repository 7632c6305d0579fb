"""A provider backend is chosen with one line of config, exactly like the default one."""

from __future__ import annotations

import pytest
from airflow_task_state import get_state_backend, resolve_state_backend
from airflow_task_state.configured_backend import reset_state_backend

# What Airflow makes of our package and settings, whatever database it uses: the SQLite pass only.
pytestmark = pytest.mark.any_database


@pytest.fixture
def redis_configured(monkeypatch, redis_url):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "airflow_state_redis.RedisStateBackend")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", redis_url)
    reset_state_backend()
    yield
    reset_state_backend()


def test_state_backend_setting_selects_the_redis_backend(redis_configured):
    from airflow_shared.state import TaskScope
    from airflow_state_redis import RedisStateBackend

    assert resolve_state_backend() is RedisStateBackend
    backend = get_state_backend()
    scope = TaskScope("dag", "run", "task", 0, dag_run_uid="1.1796040000000000")
    backend.set(scope, "remote_job_id", "app_001")
    assert backend.get(scope, "remote_job_id") == "app_001"


def test_task_code_on_redis_keeps_every_key_and_a_recreated_run_starts_empty(redis_configured, monkeypatch):
    """
    The key corpus, from real task code through the state API onto Redis, twice under the same
    run_id: `airflow dags test` deletes the earlier run and creates it again.
    """
    import ast
    import importlib.util
    from pathlib import Path

    from airflow_task_state import task_scope
    from state_testing.airflow_cli import run_airflow

    dags = Path(__file__).parents[1] / "airflow-core" / "tests" / "dags"
    spec = importlib.util.spec_from_file_location("state_key_corpus", dags / "state_key_corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    run_airflow("dags", "reserialize")
    marker = "Done. Returned value was: "
    for _ in range(2):
        output = run_airflow("dags", "test", "state_key_corpus", "2026-02-01").stdout
        [line] = [line for line in output.splitlines() if marker in line]
        returned = ast.literal_eval(line.split(marker, 1)[1].rsplit(" [airflow", 1)[0])
        assert returned["task_keys_at_start"] == 0
        assert returned["task"] == {"stored": len(corpus.CORPUS), "refused": len(corpus.REFUSED)}

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        # The newest run: other tests of the suite run the same DAG on the metastore.
        run_id = session.scalar(
            select(DagRun.run_id)
            .where(DagRun.dag_id == "state_key_corpus")
            .order_by(DagRun.id.desc())
            .limit(1)
        )
    backend = get_state_backend()
    scope = task_scope("state_key_corpus", run_id, "round_trip_every_key")
    assert backend.keys(scope) == sorted(corpus.CORPUS)


def test_redis_provider_info_is_valid_and_declares_its_section():
    import json
    from pathlib import Path

    import airflow
    import jsonschema
    from airflow_state_redis.provider_info import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
    from state_testing.airflow_cli import run_airflow

    listed = run_airflow("config", "list", "--section", "state_redis").stdout
    assert "task_ttl_seconds" in listed and "redis_conn_id" in listed
