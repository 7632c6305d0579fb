"""
The install documentation, done for real: the wheels dev/build-wheels builds, installed into a new
virtualenv with Airflow 3.2.2 from PyPI and constraints/airflow-3.2.txt, run a DAG through a real
scheduler, API server and dag processor; a retry reads what its first try stored, and the
deployment's own `airflow state` shows what the DAG wrote.

Then the mistake the upgrade documentation warns about, on that same environment: Airflow 3.3.2
installed over it. Every `airflow` command must say what happened and how to repair it; the repair
it prints must work, and the documented upgrade must then move the state the 3.2 DAG wrote.

It proves packaging (the wheels hold everything, the entry points register the provider and the
plugin, the migration runs from an installed wheel), not the database: it runs once, in the
SQLite pass.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from state_testing.deployer_venv import DeployerVenv, build_wheels, deployer_venv, uv
from state_testing.deployment import airflow_deployment

pytestmark = pytest.mark.any_database

DAGS = Path(__file__).parent / "dags" / "install"
AIRFLOW33 = "3.3.2"
DAG_ID, RUN_ID = "state_from_wheels", "from_wheels_1"
TASK = ("--dag-id", DAG_ID, "--run-id", RUN_ID, "--task-id", "submit_then_reconnect")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_wheels(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> DeployerVenv:
    return deployer_venv(tmp_path_factory.mktemp("deployer") / "venv", wheels)


@pytest.fixture(scope="module")
def database_32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the first test leaves a copy of its deployment's database, for the upgrade."""
    return tmp_path_factory.mktemp("database-32") / "airflow.db"


def test_every_distribution_is_publishable(wheels: dict[str, Path]) -> None:
    """The licence text in every wheel and sdist, and the classifiers an index lists Airflow add-ons by."""
    folder = wheels["airflow_task_state"].parent
    built = sorted(path.name for path in folder.iterdir() if path.name.endswith((".whl", ".tar.gz")))
    assert len(built) == 8, built  # wheel and sdist of the three workspace members and of upgrade/
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            [metadata_path] = [name for name in names if name.endswith(".dist-info/METADATA")]
            metadata = archive.read(metadata_path).decode()
        assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), wheel.name
        assert "License-Expression: Apache-2.0" in metadata, wheel.name
        assert "Classifier: Framework :: Apache Airflow\n" in metadata, wheel.name
        provider = "Classifier: Framework :: Apache Airflow :: Provider" in metadata
        assert provider == wheel.name.startswith("airflow_state_redis-"), wheel.name
    for sdist in folder.glob("*.tar.gz"):
        with tarfile.open(sdist) as archive:
            assert f"{sdist.name.removesuffix('.tar.gz')}/LICENSE" in archive.getnames(), sdist.name


def test_the_documented_install_runs_task_and_asset_state(venv: DeployerVenv, database_32: Path) -> None:
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
        _copy_sqlite(deployment.sql_alchemy_conn.removeprefix("sqlite:///"), database_32)


def test_airflow33_installed_over_it_says_how_to_repair_and_the_repair_works(
    venv: DeployerVenv, wheels: dict[str, Path], database_32: Path, tmp_path: Path
) -> None:
    if not database_32.exists():
        pytest.skip("needs the database of the 3.2 deployment's run, which the test before did not leave")
    env = _airflow_env(tmp_path / "home", database_32)
    # The installer only warns that airflow-task-state requires apache-airflow-core<3.3.
    venv.pip_install(f"apache-airflow-core=={AIRFLOW33}")

    broken = _run(venv, "airflow", "version", env=env)
    assert broken.stdout.strip() == AIRFLOW33
    assert f"Airflow {AIRFLOW33} (apache-airflow-core) was installed over airflow-task-state" in broken.stderr
    assert "Traceback" not in broken.stderr
    assert _airflow33_state_store_imports(venv, env).returncode != 0  # what the message is about

    # The repair the message prints, run as it prints it: this venv, made by uv, has no pip, and a
    # bare `pip` would be another Python's.
    repair = [line.strip() for line in broken.stderr.splitlines() if line.startswith("    ")]
    assert len(repair) == 2 and all(str(venv.python) in command for command in repair), broken.stderr
    path = f"{Path(uv()).parent}{os.pathsep}{os.environ['PATH']}"
    for command in repair:
        subprocess.run(command, shell=True, check=True, capture_output=True, env={**os.environ, "PATH": path})
    repaired = _run(venv, "airflow", "version", env=env)
    assert (repaired.stdout.strip(), repaired.stderr) == (AIRFLOW33, "")
    assert _airflow33_state_store_imports(venv, env).returncode == 0

    # Then the upgrade as documented moves what the 3.2 DAG wrote into Airflow 3.3's store.
    venv.pip_install(wheels["airflow_task_state_upgrade"])
    _run(venv, "airflow", "db", "migrate", env=env)
    _run(venv, "airflow-state-upgrade", env=env)
    with sqlite3.connect(database_32) as connection:
        rows = connection.execute(
            "SELECT value FROM task_state_store WHERE dag_id = ? AND key = 'found_on_retry'", (DAG_ID,)
        ).fetchall()
    assert [json.loads(value) for (value,) in rows] == ["app_001"]


def _json_of(output: str) -> list[dict]:
    """The JSON document a command printed last (Airflow 3.2.2 logs alembic's set-up to stdout first)."""
    return json.loads(output.strip().splitlines()[-1])


def _copy_sqlite(source: str, target: Path) -> None:
    with sqlite3.connect(source) as live, sqlite3.connect(target) as copy:
        live.backup(copy)


def _airflow_env(home: Path, database: Path) -> dict[str, str]:
    home.mkdir(parents=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        }
    )
    return env


def _run(
    venv: DeployerVenv, program: str, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(venv.bin(program)), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"`{program} {' '.join(args)}` exited {result.returncode}:\n{result.stderr}"
    )
    return result


def _airflow33_state_store_imports(
    venv: DeployerVenv, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Whether Airflow 3.3's default state store backend can be imported in the environment."""
    return subprocess.run(
        [str(venv.python), "-c", "from airflow.state.metastore import MetastoreBackend"],
        env=env,
        capture_output=True,
        text=True,
    )
