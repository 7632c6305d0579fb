"""
One deployment for every end-to-end test of what tasks do with state: `airflow api-server`,
`scheduler`, `dag-processor` and `triggerer` with the LocalExecutor on PostgreSQL, running the example
DAGs that ship with the package and the test DAGs of each module in this folder. It starts once and
stops after the folder's last test; each module triggers runs of its own DAGs, with run ids of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import airflow_task_state.example_dags as example_dags
import pytest
from state_testing.deployment import Deployment, airflow_deployment

TESTS = Path(__file__).parents[1]
CORE_TEST_DAGS = TESTS.parent / "airflow-core" / "tests" / "dags"
DAG_FILES = [
    *(path for path in Path(example_dags.__file__).parent.glob("*.py") if path.name != "__init__.py"),
    CORE_TEST_DAGS / "state_key_corpus.py",
    CORE_TEST_DAGS / "state_versioned_dags.py",
    CORE_TEST_DAGS / "state_deferrable_dags.py",
    TESTS / "dags" / "state_fault_dags.py",
    TESTS / "dags" / "state_clear_dags.py",
    TESTS / "dags" / "state_staged_e2e_dags.py",
]


@pytest.fixture(scope="package")
def jobs(tmp_path_factory) -> Path:
    """Where the simulated jobs of every run write their files (STATE_EXAMPLE_JOBS_DIR)."""
    return tmp_path_factory.mktemp("simulated-jobs")


@pytest.fixture(scope="package")
def objects(tmp_path_factory) -> Path:
    """The deployment's [state] object_storage_path (file://), where large values and files go."""
    return tmp_path_factory.mktemp("state-objects")


@pytest.fixture(scope="package")
def deployment(db_kind: str, jobs: Path, objects: Path, tmp_path_factory) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the end-to-end deployment runs on PostgreSQL: use --db postgres")
    folder = tmp_path_factory.mktemp("task-feature-dags")
    for path in DAG_FILES:
        shutil.copy(path, folder / path.name)
    extra_env = {
        "STATE_EXAMPLE_JOBS_DIR": str(jobs),
        "AIRFLOW__STATE__OBJECT_STORAGE_PATH": f"file://{objects}",
        # Airflow's own Execution API calls, and so ours, retry for about 4 minutes instead of 31 s:
        # on a loaded 2-core machine an API server restart can take longer than the default budget.
        "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "8",
    }
    with airflow_deployment(folder, extra_env=extra_env, users={"admin": "admin"}, triggerer=True) as running:
        yield running
