"""
A real Airflow deployment on this machine, for end-to-end tests.

``airflow_deployment(dags_folder)`` starts a PostgreSQL server of its own, runs the real
``airflow db migrate`` against it, then starts ``airflow api-server``, ``airflow scheduler`` (with the
LocalExecutor) and ``airflow dag-processor`` as separate processes, the way a deployer would. Tasks
therefore run in real task processes that talk to the real Execution API.

``airflow_deployment(dags_folder, triggerer=True)`` also runs ``airflow triggerer``, for deferrable
tasks; it is off by default, so deployments that defer nothing do not pay for it.

``airflow_deployment(dags_folder, airflow=airflow33_program())`` runs Airflow 3.3.2 instead, from the
cached environment that holds this working tree's distributions (``state_testing.airflow33``): every
component and CLI command is that environment's ``airflow``, the rest of the harness is shared.

``airflow_deployment(dags_folder, executor="celery")`` is shaped like production instead: the
scheduler runs the CeleryExecutor with a Redis server of its own as broker and result backend, and
the tasks run under a real ``airflow celery worker`` whose environment (``Deployment.worker_env``)
and home hold no secret that signs Airflow tokens, no ``[state]`` setting and no usable metadata
database: a worker reaches Airflow through the Execution API and the token the scheduler issued
for each task, nothing else (see _worker_environment).

The pytest process may have imported Airflow configured for another database, so nothing here reads
Airflow's configuration or uses its engine: the components get a complete environment of their own,
and the harness queries its database with its own SQLAlchemy engine and plain SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import psutil
import sqlalchemy as sa
from cryptography.fernet import Fernet
from packaging.version import Version

from . import dbservers

AIRFLOW = Path(sys.executable).with_name("airflow")
# Every process the harness starts carries this variable: one of the marks that find a process
# that left its component's process group or outlived its parent (see _processes_of).
MARKER_VARIABLE = "E2E_AIRFLOW_DEPLOYMENT_ID"

COMPONENTS = ("api-server", "scheduler", "dag-processor")
# The component the CeleryExecutor adds: `airflow celery worker`, with a home of its own.
CELERY_WORKER = "celery-worker"
WORKER_HOME = "worker-home"
# The optional component that runs deferred tasks' triggers (airflow_deployment(triggerer=True)).
TRIGGERER = "triggerer"
# Each component's command line, where it is not `airflow <component name>`.
COMMANDS = {CELERY_WORKER: ("celery", "worker")}
# Two cores: two task processes at a time are plenty for the tests.
CELERY_WORKER_ARGUMENTS = ("--concurrency", "2", "--without-mingle", "--without-gossip")
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
STOP_TIMEOUT = 10.0
LOG_TAIL = 4000

# Intervals that make a deployment react in about a second rather than in tens of seconds.
# Option names are those of Airflow 3.2 (several moved from [scheduler] to [dag_processor] in 3.0).
FAST_SETTINGS = {
    # How often the dag processor lists the bundle's files, and how soon it re-parses a file.
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
    "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "2",
    # Two cores: one parsing process leaves room for the scheduler and the tasks.
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
    # The LocalExecutor may fork up to this many workers, each a full copy of the scheduler.
    "AIRFLOW__CORE__PARALLELISM": "4",
    "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "1",
    # The scheduler sleeps this long only after a loop that found nothing to do.
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
}


def airflow33_program() -> Path:
    """
    The ``airflow`` of Airflow 3.3 with this working tree's distributions: this environment's when it
    is one (the suites on Airflow 3.3 run in it), else the cached one's, built on first use.
    """
    # The installed version, not airflow.__version__: importing Airflow would read its configuration.
    if Version(metadata.version("apache-airflow-core")).release[:2] >= (3, 3):
        return AIRFLOW
    from .airflow33 import airflow33

    return airflow33().bin("airflow")


class DeploymentError(RuntimeError):
    """A deployment did not start, or a command or a wait against it failed; carries the logs."""


class Deployment:
    """A running deployment: its environment, its database and its logs."""

    def __init__(
        self,
        home: Path,
        env: dict[str, str],
        api_url: str,
        sql_alchemy_conn: str,
        worker_env: dict[str, str] | None = None,
        broker_url: str | None = None,
        airflow: Path | None = None,
        admin: str | None = None,
    ) -> None:
        self.home = home
        # A user with the admin role (None: the deployment has no users), and its token once asked for.
        self.admin = admin
        self._admin_token: str | None = None
        # The `airflow` program of every component and CLI command: this environment's by default,
        # another one's (an older checkout, Airflow 3.3) for benchmarks that compare them.
        self.airflow_program = airflow or AIRFLOW
        # The environment of the CLI commands and of every component but the Celery worker.
        self.env = env
        self.api_url = api_url
        self.sql_alchemy_conn = sql_alchemy_conn
        # The Celery worker's environment and its Redis broker; None with the LocalExecutor.
        self.worker_env = worker_env
        self.broker_url = broker_url
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.arguments: dict[str, tuple[str, ...]] = {}
        # NullPool: the harness polls rarely, and nothing must hold connections when the server stops.
        self.engine = sa.create_engine(sql_alchemy_conn, poolclass=sa.pool.NullPool)

    # -- commands ---------------------------------------------------------------------------------

    def airflow(self, *args: str, timeout: float = 300) -> str:
        """Run an ``airflow`` CLI command in the deployment's environment; return its output."""
        result = subprocess.run(
            [str(self.airflow_program), *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise DeploymentError(
                f"`airflow {' '.join(args)}` exited {result.returncode}\n"
                f"--- stdout ---\n{result.stdout[-LOG_TAIL:]}\n--- stderr ---\n{result.stderr[-LOG_TAIL:]}"
            )
        return result.stdout

    def token(self, username: str) -> str:
        """A JWT for *username* (one of the deployment's users), as ``POST /auth/token`` issues it."""
        response = httpx.post(
            f"{self.api_url}/auth/token", json={"username": username, "password": PASSWORD}, timeout=30
        )
        if response.status_code != 201:
            raise DeploymentError(f"login of {username!r} failed: {response.status_code} {response.text}")
        return str(response.json()["access_token"])

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> None:
        """Trigger a run as the UI does (Airflow's REST API) when the deployment has an admin, else
        with ``airflow dags trigger`` (a CLI process costs seconds on a busy machine; a request, none)."""
        if self.admin is None:
            args = ["dags", "trigger", dag_id, "--run-id", run_id]
            if conf is not None:
                args += ["--conf", json.dumps(conf)]
            self.airflow(*args)
            return
        if self._admin_token is None:
            self._admin_token = self.token(self.admin)
        response = httpx.post(
            f"{self.api_url}/api/v2/dags/{dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None, "conf": conf or {}},
            headers={"Authorization": f"Bearer {self._admin_token}"},
            timeout=60,
        )
        if response.status_code != 200:
            raise DeploymentError(f"trigger {dag_id}/{run_id}: {response.status_code} {response.text}")

    # -- database ---------------------------------------------------------------------------------

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(sa.text(sql), params)]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT task_id, map_index, state, try_number FROM task_instance"
            " WHERE dag_id = :dag_id AND run_id = :run_id ORDER BY task_id, map_index",
            dag_id=dag_id,
            run_id=run_id,
        )

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query(
            "SELECT state FROM dag_run WHERE dag_id = :dag_id AND run_id = :run_id",
            dag_id=dag_id,
            run_id=run_id,
        )
        return rows[0]["state"] if rows else None

    # -- waits ------------------------------------------------------------------------------------

    def wait_for_dag(self, dag_id: str, timeout: float = 60) -> None:
        """Wait until the dag processor has parsed and serialized *dag_id*, so it can be triggered."""

        def parsed() -> bool:
            rows = self.query(
                "SELECT 1 FROM dag JOIN serialized_dag ON serialized_dag.dag_id = dag.dag_id"
                " WHERE dag.dag_id = :dag_id AND NOT dag.is_stale",
                dag_id=dag_id,
            )
            return bool(rows)

        self._wait(parsed, timeout, f"dag {dag_id!r} to be parsed")

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 120) -> str:
        """Wait until the dag run has finished; return its state (``success`` or ``failed``)."""
        state: str | None = None

        def finished() -> bool:
            nonlocal state
            state = self.run_state(dag_id, run_id)
            return state in ("success", "failed")

        self._wait(finished, timeout, f"run {dag_id}/{run_id} to finish")
        assert state is not None
        return state

    def _wait(self, done: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.check_alive()
            if time.monotonic() > deadline:
                raise DeploymentError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")
            time.sleep(interval)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """
        Every Airflow process of the deployment stopped (SIGSTOP) in the block, resumed after: for a
        benchmark that measures another deployment on the same cores. Its database server is left
        running (idle, with no client running).
        """
        members = _processes_of(self)
        for process in members:
            with contextlib.suppress(psutil.Error):
                process.suspend()
        try:
            yield
        finally:
            for process in members:
                with contextlib.suppress(psutil.Error):
                    process.resume()

    def check_alive(self) -> None:
        """Fail at once, with the logs, when a component has died instead of waiting for a timeout."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise DeploymentError(f"airflow {name} exited with {process.returncode}\n{self.logs()}")

    def restart(self, name: str, timeout: float = 120) -> float:
        """
        Stop one component (SIGTERM to its process group, SIGKILL after STOP_TIMEOUT), start it
        again with the same arguments, and wait until it answers; return how long it was away.
        """
        process = self.processes[name]
        last_triggerer_job = self._last_job_id("TriggererJob") if name == TRIGGERER else 0
        stopped_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _start(self, name, *self.arguments[name])
        if name == "api-server":
            self._wait(lambda: _api_answers(f"{self.api_url}/execution/health"), timeout, "the api-server")
        elif name == CELERY_WORKER:
            self._wait(self.worker_answers, timeout, "the celery worker")
        elif name == TRIGGERER:
            # A new triggerer registers a job row of its own, running once it has heartbeated.
            self._wait(
                lambda: self._last_job_id("TriggererJob", "running") > last_triggerer_job,
                timeout,
                "the triggerer",
            )
        return time.monotonic() - stopped_at

    def _last_job_id(self, job_type: str, state: str | None = None) -> int:
        """The highest id of the component jobs (`job` rows) of *job_type* (in *state*); 0 if none."""
        where = "job_type = :job_type" + ("" if state is None else " AND state = :state")
        rows = self.query(f"SELECT MAX(id) AS id FROM job WHERE {where}", job_type=job_type, state=state)
        return int(rows[0]["id"] or 0)

    @property
    def worker_home(self) -> Path:
        """The Celery worker's AIRFLOW_HOME (and working directory)."""
        return self.home / WORKER_HOME

    def worker_answers(self) -> bool:
        """Whether a Celery worker consumes from the broker (answers a ``ping`` broadcast)."""
        if self.broker_url is None:
            return False
        from celery import Celery

        # A bare Celery app, not Airflow's: the harness reads no Airflow configuration.
        app = Celery(broker=self.broker_url)
        try:
            with contextlib.suppress(OSError):
                return bool(app.control.ping(timeout=1.0))
            return False
        finally:
            app.close()

    # -- logs -------------------------------------------------------------------------------------

    def task_logs(self, dag_id: str, run_id: str) -> str:
        """Every log of the run's task instances, whole (the tails :meth:`logs` shows can miss a line)."""
        run_logs = [
            path
            for logs_dir in (self.home / "logs", self.worker_home / "logs")
            for path in sorted(logs_dir.glob(f"dag_id={dag_id}/run_id={run_id}/**/*"))
            if path.is_file()
        ]
        return "\n".join(path.read_text(errors="replace") for path in run_logs)

    def logs(self) -> str:
        """The tails of every component's log, the task logs and the dag processor's file logs."""
        files = [self.home / f"{name}.log" for name in dict.fromkeys([*COMPONENTS, *self.processes])]
        # The Celery worker writes its task logs into its own home, as a worker on another machine would.
        for logs_dir in (self.home / "logs", self.worker_home / "logs"):
            if logs_dir.is_dir():
                files += sorted(path for path in logs_dir.rglob("*") if path.is_file())
        parts = []
        for path in files:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                parts.append(f"===== {path.relative_to(self.home)} (tail) =====\n{text[-LOG_TAIL:]}")
        return "\n".join(parts)


# -- set-up and tear-down -------------------------------------------------------------------------


def _base_environment(airflow: Path = AIRFLOW) -> dict[str, str]:
    """The machine's environment without any Airflow setting the calling process may carry."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "_AIRFLOW")) and key != "STATE_TEST_HOME"
    }
    env["PATH"] = f"{airflow.parent}{os.pathsep}{env.get('PATH', '')}"
    # The dags folder may be inside the repository: leave no __pycache__ behind in it.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Task processes reach the Execution API on loopback; a proxy set for the machine must not apply.
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(filter(None, [env.get(name), "127.0.0.1", "localhost"]))
    return env


def _deployment_environment(
    home: Path,
    dags_folder: Path,
    url: str,
    port: int,
    extra_env: dict[str, str] | None,
    executor: str = "LocalExecutor",
    celery: dict[str, str] | None = None,
    airflow: Path = AIRFLOW,
) -> dict[str, str]:
    env = _base_environment(airflow)
    env.update(
        {
            MARKER_VARIABLE: secrets.token_hex(8),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # Every component signs or checks the Execution API's tokens with this secret.
            # 64 bytes or more: the default HS512 warns about shorter keys.
            # The API server also derives the state API's credential key from it.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            # One key for all components, rather than whatever the first of them writes to airflow.cfg.
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            # The scheduler serves task logs on a fixed port (8793) of every interface by default,
            # which a second deployment on the machine would fail to bind.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(dbservers.free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(dbservers.free_port()),
            **FAST_SETTINGS,
            **(celery or {}),
        }
    )
    env.update(extra_env or {})
    return env


#: The password of every user a deployment is started with.
PASSWORD = "state-test-password"


def _user_settings(home: Path, users: dict[str, str] | None) -> dict[str, str]:
    """SimpleAuthManager's users and a passwords file written first, so no password is generated."""
    if not users:
        return {}
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(dict.fromkeys(users, PASSWORD)))
    roles = ",".join(f"{name}:{role}" for name, role in users.items())
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": roles,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }


def _celery_settings(broker_url: str) -> dict[str, str]:
    """The CeleryExecutor's settings, the same for the scheduler and the worker: Redis in both roles."""
    return {
        "AIRFLOW__CELERY__BROKER_URL": broker_url,
        # Without a result backend the provider stores results in the metadata database
        # (db+<sql_alchemy_conn>), which the worker must not reach. Another database number of the
        # same Redis keeps results and queues apart.
        "AIRFLOW__CELERY__RESULT_BACKEND": broker_url.rsplit("/", 1)[0] + "/1",
    }


# What the worker never holds, even when the test's extra_env sets it (prefixes, so that the _CMD and
# _SECRET forms go too): the key that signs Airflow's tokens (the scheduler issues each task's token;
# a worker only presents it), the API server's own secret, the Fernet key and the metadata database
# (connections and variables reach a task decrypted, through the Execution API), and every setting
# of the task-state feature, which lives on the API server's side.
WORKER_FORBIDDEN = (
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API_AUTH__JWT_PRIVATE_KEY_PATH",
    "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__STATE__",
)


def _worker_environment(
    env: dict[str, str], worker_home: Path, extra_env: dict[str, str] | None
) -> dict[str, str]:
    """
    The Celery worker's environment: built up from the machine's, not *env* with secrets taken out,
    so that it holds only what a worker needs to take a task from the broker, run it and serve its
    log. Everything else is Airflow's default, from an airflow.cfg that sets nothing (_make_worker_home).

    Airflow 3.2.1's worker needs no metadata database: the task supervisor talks to the Execution
    API with the token that came with the task. The one use it still makes of the database is the
    CLI's audit row (`cli_celery` in the `log` table) at start, which fails with a warning
    ("Failed to log action ... unable to open database file") and is otherwise harmless.

    The API server cannot fetch the logs of the worker's tasks from the worker's log server: that
    takes the API server's own secret ([api] secret_key), which a worker need not hold. Tests read
    the log files (Deployment.logs).
    """
    worker_env = _base_environment()
    worker_env.update(
        {
            MARKER_VARIABLE: env[MARKER_VARIABLE],
            # Airflow and Celery retitle their processes with setproctitle, which by default
            # overwrites what /proc/<pid>/environ shows; with this set, that file stays the real
            # environment, which tests can check.
            "SPT_NOENV": "1",
            # A home of its own: the first `airflow` command run in a home that has no airflow.cfg
            # writes the full default configuration there, with a generated [api_auth] jwt_secret
            # and [api] secret_key, and the other components share theirs.
            "AIRFLOW_HOME": str(worker_home),
            # The task process parses its DAG file in the dags-folder bundle, at this path.
            "AIRFLOW__CORE__DAGS_FOLDER": env["AIRFLOW__CORE__DAGS_FOLDER"],
            # Else the task process also sets up the bundle of Airflow's example DAGs and imports
            # their plugins.
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # Where the task supervisor reaches the Execution API, with the task's token.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"],
            "AIRFLOW__CELERY__BROKER_URL": env["AIRFLOW__CELERY__BROKER_URL"],
            "AIRFLOW__CELERY__RESULT_BACKEND": env["AIRFLOW__CELERY__RESULT_BACKEND"],
            # The worker serves its tasks' logs on this port (the default, 8793 on every interface,
            # would collide with another deployment's); the API server knows the same port. The
            # scheduler serves none with the CeleryExecutor.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"],
            # Airflow builds a metadata engine at every start (settings.initialize), from this URL or
            # from the default, a SQLite file in the home. This one is in a directory that does not
            # exist: any use of the database fails, loudly, instead of creating a file.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
                f"sqlite:///{worker_home / 'no-metadata-database' / 'airflow.db'}"
            ),
        }
    )
    worker_env.update({k: v for k, v in (extra_env or {}).items() if not k.startswith(WORKER_FORBIDDEN)})
    return worker_env


def _make_worker_home(worker_home: Path) -> None:
    """
    The worker's home, with an airflow.cfg that sets nothing. Without one, the ``airflow`` CLI
    writes the full default configuration there at start, with a freshly generated jwt_secret.
    """
    worker_home.mkdir()
    (worker_home / "airflow.cfg").write_text(
        "# The Celery worker's configuration is its environment; this file keeps the CLI from\n"
        "# writing one with generated secrets.\n"
    )


def _start(deployment: Deployment, name: str, *args: str) -> None:
    """Start one component in a process group of its own, its output going to <home>/<name>.log."""
    deployment.arguments[name] = args
    worker = name == CELERY_WORKER
    assert not worker or deployment.worker_env is not None
    with open(deployment.home / f"{name}.log", "ab") as log:
        deployment.processes[name] = subprocess.Popen(
            [str(deployment.airflow_program), *COMMANDS.get(name, (name,)), *args],
            env=deployment.worker_env if worker else deployment.env,
            cwd=deployment.worker_home if worker else deployment.home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# No proxy: the API server is on loopback.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _api_answers(url: str) -> bool:
    with contextlib.suppress(OSError), _DIRECT.open(url, timeout=2) as response:
        return response.status == 200
    return False


def _wait_until_running(deployment: Deployment, timeout: float) -> None:
    """
    Wait for the Execution API to answer and for the scheduler and dag processor (and the triggerer,
    when there is one) to heartbeat.
    """
    expected = {"SchedulerJob", "DagProcessorJob"}
    if TRIGGERER in deployment.processes:
        expected.add("TriggererJob")

    def running() -> bool:
        if not _api_answers(f"{deployment.api_url}/execution/health"):
            return False
        jobs = deployment.query("SELECT DISTINCT job_type FROM job WHERE state = 'running'")
        return expected <= {row["job_type"] for row in jobs}

    deployment._wait(running, timeout, f"the api-server and {', '.join(sorted(expected))} to run")
    if CELERY_WORKER in deployment.processes:
        deployment._wait(deployment.worker_answers, timeout, "the celery worker to answer")


def _processes_of(deployment: Deployment) -> set[psutil.Process]:
    """Every live process of the deployment, including those that left their component's group.

    A process can leave its group (a task's subprocess started with ``start_new_session``, as
    Airflow's subprocess hook does), and orphans are adopted by init, so the groups alone may miss
    some. Three marks find them: descent from a component; the working
    directory, which is the home unless a process changed it; and the marker variable, which
    survives in the environment a task passes to its own subprocesses (setproctitle overwrites what
    /proc shows of a retitled Airflow process's environment, so that one mark alone is not enough).
    """
    found: set[psutil.Process] = set()
    for popen in deployment.processes.values():
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(popen.pid)
            found.update([root, *root.children(recursive=True)])
    marker, home = deployment.env[MARKER_VARIABLE], str(deployment.home)
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if (
                process.cwd() == home
                or process.cwd().startswith(home + os.sep)
                or process.environ().get(MARKER_VARIABLE) == marker
            ):
                found.add(process)
    found.discard(psutil.Process())
    return found


def _stop(deployment: Deployment) -> None:
    """Stop every process of the deployment: SIGTERM to each component's group, then SIGKILL to all."""
    members = _processes_of(deployment)
    for popen in deployment.processes.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for popen in deployment.processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=max(0.1, deadline - time.monotonic()))
    for popen in deployment.processes.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
    # Whatever a component started during its shutdown is found by a second look.
    leftovers = [process for process in members | _processes_of(deployment) if process.is_running()]
    for process in leftovers:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(leftovers, timeout=5)


@contextlib.contextmanager
def airflow_deployment(
    dags_folder: Path,
    extra_env: dict[str, str] | None = None,
    start_timeout: float = 120,
    database: str = "postgres",
    executor: str = "local",
    users: dict[str, str] | None = None,
    airflow: Path | None = None,
    triggerer: bool = False,
) -> Iterator[Deployment]:
    """
    Run a database (``postgres``, ``mysql`` or ``sqlite``), ``airflow db migrate``, the API
    server, the scheduler and the dag processor; with ``executor="celery"``, also a Redis server
    and ``airflow celery worker``.

    *extra_env* goes to every component; the Celery worker gets it without the variables a worker
    must not hold (WORKER_FORBIDDEN).

    *users* maps user names to SimpleAuthManager roles (``viewer``, ``user``, ``op``, ``admin``);
    each gets the password :data:`PASSWORD`, and :meth:`Deployment.token` logs them in.

    *airflow* is the ``airflow`` program every component runs (default: this environment's).

    *triggerer* also runs ``airflow triggerer`` (in the environment of the scheduler, as Airflow's
    own deployments do), which deferred tasks need; the start waits for its first heartbeat.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: choose {' or '.join(EXECUTORS)}")
    home = Path(tempfile.mkdtemp(prefix="airflow-e2e-home-"))
    try:
        with contextlib.ExitStack() as servers:
            url = servers.enter_context(dbservers.database(database, home))
            broker_url = servers.enter_context(dbservers.redis_server()) if executor == "celery" else None
            port = dbservers.free_port()
            env = _deployment_environment(
                home,
                Path(dags_folder).resolve(),
                url,
                port,
                {**_user_settings(home, users), **(extra_env or {})},
                executor=EXECUTORS[executor],
                celery=_celery_settings(broker_url) if broker_url else None,
                airflow=airflow or AIRFLOW,
            )
            worker_env = None
            if broker_url:
                worker_env = _worker_environment(env, home / WORKER_HOME, extra_env)
                _make_worker_home(home / WORKER_HOME)
            deployment = Deployment(
                home,
                env,
                f"http://127.0.0.1:{port}",
                url,
                worker_env,
                broker_url,
                airflow=airflow,
                admin=next((name for name, role in (users or {}).items() if role == "admin"), None),
            )
            try:
                deployment.airflow("db", "migrate", timeout=600)
                _start(deployment, "api-server", "--host", "127.0.0.1", "--port", str(port))
                _start(deployment, "scheduler")
                _start(deployment, "dag-processor")
                if triggerer:
                    _start(deployment, TRIGGERER)
                if worker_env is not None:
                    _start(deployment, CELERY_WORKER, *CELERY_WORKER_ARGUMENTS)
                _wait_until_running(deployment, start_timeout)
                yield deployment
            finally:
                _stop(deployment)
                deployment.engine.dispose()
    finally:
        shutil.rmtree(home, ignore_errors=True)
