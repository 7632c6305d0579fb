"""
Nothing pays for what it does not use: every Airflow process reads the providers' info at start-up
(the scheduler, the dag processor, every `airflow` command), and most never touch state. Such a
process imports this package's registration and nothing more: not the task API, not the contract,
not redis-py (the Redis provider is installed in the test environment, not configured).
"""

from __future__ import annotations

import json
import subprocess
import sys

import airflow_task_state
import pytest
from airflow_task_state import exceptions

pytestmark = pytest.mark.any_database  # no database: processes' imports

# What a process that never touches state may import of ours.
REGISTRATION = {
    "_airflow_task_state_legacy",  # airflow_task_state.pth: the 0.7 import path, at interpreter start
    "airflow_task_state",
    "airflow_task_state.provider_info",
    "airflow_task_state.state_options",
    "airflow_task_state.metastore",
    "airflow_task_state.metastore.reset_hook",
    "airflow_state_redis",
    "airflow_state_redis.provider_info",
    "airflow_state_redis._defaults",
}
OURS = ("_airflow_task_state_legacy", "airflow_task_state", "airflow_state_redis", "airflow_shared", "redis")

_STARTED_AIRFLOW = f"""
import json, sys
from airflow.configuration import conf
from airflow.providers_manager import ProvidersManager
ProvidersManager().initialize_providers_configuration()
conf.get("state", "backend")  # an option of ours, as Airflow's config reads it
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {OURS!r})))
"""


def test_a_process_that_never_touches_state_imports_only_the_registration():
    result = subprocess.run([sys.executable, "-c", _STARTED_AIRFLOW], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = set(json.loads(result.stdout.splitlines()[-1]))
    assert "airflow_task_state.provider_info" in imported and "airflow_state_redis.provider_info" in imported
    assert imported <= REGISTRATION, sorted(imported - REGISTRATION)


def test_the_package_offers_every_error_by_name_without_importing_it_first():
    assert set(exceptions.__all__) <= set(airflow_task_state.__all__)
    for name in exceptions.__all__:
        assert getattr(airflow_task_state, name) is getattr(exceptions, name)
