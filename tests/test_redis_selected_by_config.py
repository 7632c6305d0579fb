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
