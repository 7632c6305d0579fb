"""
One production-shaped deployment for the Celery tests: the CeleryExecutor with a Redis broker and a
real `airflow celery worker` that holds no secret able to sign Airflow tokens, no `[state]` setting
and no metadata database; api-server, scheduler and dag-processor on PostgreSQL. It starts once and
stops after the folder's last test.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import airflow_task_state.example_dags as example_dags
import pytest
from state_testing.deployment import Deployment, airflow_deployment

DAGS = Path(__file__).parents[1] / "dags"
EXAMPLE_DAGS = Path(example_dags.__file__).parent
DAG_FILES = [
    DAGS / "celery_smoke.py",
    DAGS / "celery_broker_dags.py",
    DAGS / "state_isolation_dags.py",
    EXAMPLE_DAGS / "example_resumable_job.py",
    EXAMPLE_DAGS / "simulated_jobs.py",
]


@pytest.fixture(scope="package")
def markers(tmp_path_factory) -> Path:
    """Where the smoke and broker DAGs' tasks record what they saw (CELERY_SMOKE_MARKERS)."""
    return tmp_path_factory.mktemp("celery-markers")


@pytest.fixture(scope="package")
def shared_dir(tmp_path_factory) -> Path:
    """Where the isolation DAGs' tasks and their simulated jobs write (ISOLATION_DIR)."""
    folder = tmp_path_factory.mktemp("isolation")
    (folder / "jobs").mkdir()
    return folder


@pytest.fixture(scope="package")
def deployment(db_kind: str, markers: Path, shared_dir: Path, tmp_path_factory) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the Celery deployment runs on PostgreSQL: use --db postgres")
    folder = tmp_path_factory.mktemp("celery-dags")
    for path in DAG_FILES:
        shutil.copy(path, folder / path.name)
    extra_env = {
        "CELERY_SMOKE_MARKERS": str(markers),
        "ISOLATION_DIR": str(shared_dir),
        "STATE_EXAMPLE_JOBS_DIR": str(shared_dir / "jobs"),
    }
    with airflow_deployment(folder, extra_env=extra_env, executor="celery") as running:
        yield running
