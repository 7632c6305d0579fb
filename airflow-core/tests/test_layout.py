"""
The worker side stays light: task processes load neither the API server's code nor the storage's,
not even through the plugin, which Airflow loads in every process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Runs in the SQLite pass only: what a task process imports does not depend on the metadata database.
pytestmark = pytest.mark.any_database

PROBE = """
import json, sys
import airflow.sdk
before = set(sys.modules)
import airflow_task_state.plugin
import airflow_task_state.resumable
import airflow_task_state.worker.client
from airflow_task_state import asset_state, task_state
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_worker_side_imports_neither_fastapi_nor_the_orm_nor_server_code():
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    )
    assert "airflow_task_state.worker.accessors" in loaded  # the probe really imported the worker side
    heavy = [
        name
        for name in loaded
        if name.split(".")[0] in ("fastapi", "starlette", "a2wsgi")
        or name.startswith(
            ("airflow_task_state.api", "airflow_task_state.metastore", "airflow.models", "sqlalchemy.orm")
        )
    ]
    assert heavy == []
