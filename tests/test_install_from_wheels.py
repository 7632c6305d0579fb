"""
The install documentation, done for real: the wheels dev/build-wheels builds, installed into a new
virtualenv with Airflow 3.2.2 from PyPI and constraints/airflow-3.2.txt, run a DAG through a real
scheduler, API server and dag processor; a retry reads what its first try stored, and the
deployment's own `airflow state` shows what the DAG wrote.

It proves packaging (the wheels hold everything, the entry points register the provider and the
plugin, the migration runs from an installed wheel), not the database: it runs once, in the
SQLite pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from state_testing.deployer_venv import DeployerVenv, build_wheels, deployer_venv
from state_testing.deployment import airflow_deployment

pytestmark = pytest.mark.any_database

DAGS = Path(__file__).parent / "dags" / "install"
DAG_ID, RUN_ID = "state_from_wheels", "from_wheels_1"
TASK = ("--dag-id", DAG_ID, "--run-id", RUN_ID, "--task-id", "submit_then_reconnect")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_wheels(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> DeployerVenv:
    return deployer_venv(tmp_path_factory.mktemp("deployer") / "venv", wheels)


def test_the_documented_install_runs_task_and_asset_state(venv: DeployerVenv) -> None:
    assert venv.version_of("apache-airflow-core") == "3.2.2"
    with airflow_deployment(DAGS, database="sqlite", airflow=venv.bin("airflow")) as deployment:
        deployment.wait_for_dag(DAG_ID)
        deployment.trigger(DAG_ID, RUN_ID)
        assert deployment.wait_for_run(DAG_ID, RUN_ID, timeout=180) == "success", deployment.logs()
        [instance] = deployment.task_instances(DAG_ID, RUN_ID)
        assert instance["try_number"] == 2

        [found] = _json_of(deployment.airflow("state", "get", "found_on_retry", *TASK, "-o", "json"))
        assert (found["value"], found["updated_by_try"]) == ("app_001", 2)
        [watermark] = _json_of(
            deployment.airflow("state", "get", "watermark", "--asset-name", "orders", "-o", "json")
        )
        assert watermark["value"] == "2026-12-01"


def _json_of(output: str) -> list[dict]:
    """The JSON document a command printed last (Airflow 3.2.2 logs alembic's set-up to stdout first)."""
    return json.loads(output.strip().splitlines()[-1])
