"""
One deployment for every end-to-end test of the operators' surfaces (REST API, UI, hostile
requests): PostgreSQL, users of each role, a per-DAG auth manager and one finished run of each
operator DAG. It starts once and stops after the folder's last test.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from state_testing.deployment import Deployment, airflow_deployment

#: The users of the operator deployment, with their SimpleAuthManager roles. alice is granted the
#: DAG operator_alpha only (state_testing.auth_managers.DAG_GRANTS).
OPERATOR_USERS = {"admin": "admin", "viewer": "viewer", "editor": "user", "ops": "op", "alice": "viewer"}
OPERATOR_DAGS = Path(__file__).parents[1] / "dags" / "state_operator_dags.py"
DEV = Path(__file__).parents[2] / "dev"


@pytest.fixture(scope="package")
def operator_objects(tmp_path_factory) -> Path:
    """The API server's [state] object_storage_path (file://): operators may fetch large values."""
    return tmp_path_factory.mktemp("operator-objects")


@pytest.fixture(scope="package")
def operator_deployment(db_kind: str, operator_objects: Path, tmp_path_factory) -> Iterator[Deployment]:
    """
    One deployment (PostgreSQL) for every test of the operator surfaces: users of each role, the
    per-DAG auth manager, and one finished run of each operator DAG (run id ``first``), so task
    state (mapped and not) and asset state exist.
    """
    if db_kind != "postgres":
        pytest.skip("the operator deployment runs on PostgreSQL: use --db postgres")
    folder = tmp_path_factory.mktemp("operator-dags")
    shutil.copy(OPERATOR_DAGS, folder / OPERATOR_DAGS.name)
    extra_env = {
        "PYTHONPATH": str(DEV),
        "AIRFLOW__CORE__AUTH_MANAGER": "state_testing.auth_managers.PerDagAuthManager",
        "AIRFLOW__STATE__OBJECT_STORAGE_PATH": f"file://{operator_objects}",
    }
    with airflow_deployment(folder, extra_env=extra_env, users=OPERATOR_USERS) as running:
        for dag_id in ("operator_alpha", "operator_beta"):
            running.wait_for_dag(dag_id, timeout=120)
            running.trigger(dag_id, "first")
        for dag_id in ("operator_alpha", "operator_beta"):
            state = running.wait_for_run(dag_id, "first", timeout=240)
            assert state == "success", running.logs()
        yield running
