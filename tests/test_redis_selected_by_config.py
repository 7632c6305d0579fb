"""A provider backend is chosen with one line of config, exactly like the default one."""

from __future__ import annotations

import pytest
from airflow.state import get_state_backend, resolve_state_backend
from airflow.state.backend import reset_state_backend


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
    scope = TaskScope("dag", "run", "task", 0)
    backend.set(scope, "remote_job_id", "app_001")
    assert backend.get(scope, "remote_job_id") == "app_001"


def test_redis_provider_info_is_valid_and_declares_its_section():
    import json
    from pathlib import Path

    import airflow
    import jsonschema
    from airflow_state_redis.provider_info import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
    from conftest_helpers import run_airflow

    listed = run_airflow("config", "list", "--section", "state_redis").stdout
    assert "task_ttl_seconds" in listed and "redis_conn_id" in listed
