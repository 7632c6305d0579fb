"""
Real deployments for the benchmarks that run task code: this project's (on this environment's Airflow,
or on a deployer's Airflow 3.2.2 built from this tree's wheels), an older checkout's and Airflow 3.3.2's
(with this tree's distributions), each the test harness's (its own PostgreSQL server, api-server,
scheduler with the LocalExecutor, dag-processor), started with the ``airflow`` program of the
environment wanted.

Task code reports back through files: a bench DAG is written into a dags folder with its settings
filled in, and its tasks write JSON samples into the directory named by ``RESULTS_VARIABLE``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from state_testing import deployment as harness
from state_testing.deployment import airflow33_program

RESULTS_VARIABLE = "STATE_BENCH_RESULTS"
THIS_AIRFLOW = Path(sys.executable).with_name("airflow")


@dataclass
class Side:
    """One side of a comparison: a running deployment and the directory its tasks report to."""

    name: str
    deployment: harness.Deployment
    results: Path

    def run_dag(self, dag_id: str, run_id: str, timeout: float, conf: dict | None = None) -> None:
        """Trigger *dag_id* as *run_id* (with *conf*) and wait until it has succeeded."""
        self.deployment.trigger(dag_id, run_id, conf)
        state = self.deployment.wait_for_run(dag_id, run_id, timeout=timeout)
        if state != "success":
            raise harness.DeploymentError(
                f"{self.name}: run {run_id} ended {state}\n{self.deployment.logs()}"
            )

    def samples(self, prefix: str = "") -> list[dict]:
        """The JSON samples the tasks wrote, of the runs whose id starts with *prefix*."""
        return [json.loads(path.read_text()) for path in sorted(self.results.glob(f"{prefix}*.json"))]

    def running_task_instances(self, dag_id: str, run_id: str, count: int, timeout: float) -> list[dict]:
        """Wait until *count* task instances of the run are running; return their rows."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.deployment.query(
                "SELECT id, dag_id, run_id, task_id, map_index, try_number FROM task_instance "
                "WHERE dag_id = :dag_id AND run_id = :run_id AND state = 'running' ORDER BY map_index",
                dag_id=dag_id,
                run_id=run_id,
            )
            if len(rows) >= count:
                return rows[:count]
            self.deployment.check_alive()
            if time.monotonic() > deadline:
                raise harness.DeploymentError(
                    f"{self.name}: {len(rows)} of {count} task instances running after {timeout}s\n"
                    f"{self.deployment.logs()}"
                )
            time.sleep(1)


@contextlib.contextmanager
def dags_folder(dags: dict[str, str]) -> Iterator[Path]:
    """A temporary dags folder holding *dags* (file name: source)."""
    folder = Path(tempfile.mkdtemp(prefix="state-bench-dags-"))
    try:
        for name, source in dags.items():
            (folder / name).write_text(source)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def side(
    name: str, dags: Path, airflow: Path = THIS_AIRFLOW, extra_env: dict[str, str] | None = None
) -> Iterator[Side]:
    """A deployment running *airflow* on *dags*, its tasks reporting to a results directory of its own."""
    results = Path(tempfile.mkdtemp(prefix=f"state-bench-{name}-"))
    started = time.monotonic()
    try:
        with harness.airflow_deployment(
            dags, extra_env={RESULTS_VARIABLE: str(results), **(extra_env or {})}, airflow=airflow
        ) as deployment:
            print(f"{name}: deployment up in {time.monotonic() - started:.0f}s", flush=True)
            yield Side(name, deployment, results)
    finally:
        shutil.rmtree(results, ignore_errors=True)


def airflow322_program(folder: Path) -> Path:
    """
    The ``airflow`` of a deployer's Airflow 3.2.2 made in *folder*: this tree's wheels installed as the
    install docs say (state_testing.deployer_venv), plus the PostgreSQL drivers the harness's server needs.
    """
    from state_testing.deployer_venv import CONSTRAINTS, build_wheels, deployer_venv

    started = time.monotonic()
    venv = deployer_venv(folder / "venv", build_wheels(folder / "dist"))
    venv.pip_install("-c", CONSTRAINTS, "psycopg2-binary", "asyncpg")
    print(f"Airflow 3.2.2 environment built in {time.monotonic() - started:.0f}s", flush=True)
    return venv.bin("airflow")


def with_bytecode(airflow: Path) -> Path:
    """
    *airflow*, once its environment's modules are compiled to bytecode, as pip leaves them. uv installs
    none, and the harness's processes write none (PYTHONDONTWRITEBYTECODE), so every task process would
    compile Airflow's modules and ours from source: the timed import of the API with them.
    """
    python = airflow.with_name("python")
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = subprocess.run([python, "-c", purelib], capture_output=True, text=True, check=True)
    # Not checked: a few files of some distributions are not Python 3 (templates, tests).
    subprocess.run([python, "-m", "compileall", "-qq", "-j", "0", site_packages.stdout.strip()], check=False)
    return airflow


def airflow33_python(script: str, env: dict[str, str], *args: str) -> str:
    """Run *script* with Airflow 3.3.2's Python in *env*; return what it printed."""
    python = airflow33_program().with_name("python")
    result = subprocess.run(
        [str(python), "-c", script, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"Airflow 3.3.2 script failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def wait_for_dags(sides: list[Side], dag_ids: list[str], timeout: float = 180) -> None:
    for each in sides:
        for dag_id in dag_ids:
            each.deployment.wait_for_dag(dag_id, timeout=timeout)
