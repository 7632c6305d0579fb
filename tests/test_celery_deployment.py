"""
The harness's production-shaped deployment: the CeleryExecutor with a Redis broker, and a real
`airflow celery worker` that holds no secret able to sign Airflow tokens, no `[state]` setting and
no metadata database. One tiny DAG runs there; the checks are about where and how it ran.
"""

from __future__ import annotations

import configparser
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from state_testing.deployment import CELERY_WORKER, Deployment, airflow_deployment

DAG_ID = "celery_smoke"
RUN_ID = "celery_smoke_1"

DAG_FILE = textwrap.dedent(
    """
    import json
    import os
    from pathlib import Path

    import pendulum
    import psutil
    from airflow.sdk import dag, get_current_context, task


    @dag(dag_id="celery_smoke", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False)
    def celery_smoke():
        @task
        def where_am_i():
            me = psutil.Process()
            marker = {
                "pid": me.pid,
                "ancestors": [parent.pid for parent in me.parents()],
                "airflow_variables": sorted(k for k in os.environ if k.startswith("AIRFLOW")),
            }
            run_id = get_current_context()["run_id"]
            Path(os.environ["CELERY_SMOKE_MARKERS"], f"{run_id}.json").write_text(json.dumps(marker))
            return "ran"

        where_am_i()


    celery_smoke()
    """
)


def forbidden(name: str) -> bool:
    """What no worker may hold: the token signing secret and any setting of the task-state feature."""
    return name == "AIRFLOW__API_AUTH__JWT_SECRET" or name.startswith("AIRFLOW__STATE__")


@pytest.fixture(scope="module")
def markers(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("celery-markers")


@pytest.fixture(scope="module")
def deployment(db_kind: str, markers: Path, tmp_path_factory) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the end-to-end deployment runs on PostgreSQL: use --db postgres")
    dags_folder = tmp_path_factory.mktemp("celery-dags")
    (dags_folder / "celery_smoke.py").write_text(DAG_FILE)
    with airflow_deployment(
        dags_folder, extra_env={"CELERY_SMOKE_MARKERS": str(markers)}, executor="celery"
    ) as d:
        yield d


@pytest.fixture(scope="module")
def marker(deployment: Deployment, markers: Path) -> dict:
    """Run the DAG once; what its task recorded about the process it ran in."""
    deployment.wait_for_dag(DAG_ID, timeout=90)
    deployment.trigger(DAG_ID, RUN_ID)
    assert deployment.wait_for_run(DAG_ID, RUN_ID, timeout=120) == "success", deployment.logs()
    return json.loads((markers / f"{RUN_ID}.json").read_text())


def test_the_task_ran_under_the_celery_worker(deployment, marker):
    # The task process descends from the `airflow celery worker` process, not from the scheduler.
    assert deployment.processes[CELERY_WORKER].pid in marker["ancestors"]
    assert deployment.processes["scheduler"].pid not in marker["ancestors"]

    [ti] = deployment.query(
        "SELECT state, external_executor_id FROM task_instance WHERE dag_id = :d AND run_id = :r",
        d=DAG_ID,
        r=RUN_ID,
    )
    # The CeleryExecutor records the Celery task's id; the LocalExecutor records none.
    assert ti["state"] == "success"
    assert ti["external_executor_id"]
    assert ti["external_executor_id"] in (deployment.home / f"{CELERY_WORKER}.log").read_text()
    [row] = deployment.query(
        "SELECT value FROM xcom WHERE dag_id = :d AND run_id = :r AND key = 'return_value'",
        d=DAG_ID,
        r=RUN_ID,
    )
    # A JSON column: psycopg2 decodes it.
    assert row["value"] == "ran"


def test_the_worker_and_its_tasks_hold_no_signing_secret_and_no_state_setting(deployment, marker):
    assert deployment.worker_env is not None
    # The real environment of the running worker, not only what the harness meant to give it
    # (readable because the harness sets SPT_NOENV: setproctitle leaves /proc/<pid>/environ alone).
    worker = psutil.Process(deployment.processes[CELERY_WORKER].pid)
    environ = worker.environ()
    assert environ["AIRFLOW_HOME"] == str(deployment.worker_home)
    for variables in (deployment.worker_env, environ, marker["airflow_variables"]):
        assert not [name for name in variables if forbidden(name)]
    # Whatever database URL the worker has, it is not the metadata database's.
    assert deployment.sql_alchemy_conn not in environ.values()
    # The other components do hold the secret, under this name.
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in deployment.env


def jwt_secret_in(config_file: Path) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config_file)
    return parser.get("api_auth", "jwt_secret", fallback="")


def test_the_worker_home_has_no_configuration_with_a_jwt_secret(deployment, marker):
    # The other components' home has one: the first `airflow` command wrote it, secrets and all.
    assert jwt_secret_in(deployment.home / "airflow.cfg")
    assert deployment.worker_home.is_relative_to(deployment.home)
    assert (deployment.worker_home / "airflow.cfg").is_file()
    secret = deployment.env["AIRFLOW__API_AUTH__JWT_SECRET"]
    for path in deployment.worker_home.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
            if path.suffix == ".cfg":
                assert not jwt_secret_in(path), path
