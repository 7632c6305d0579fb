"""
A second Python environment with Airflow 3.3: the suites that run on Airflow 3.3, and the upgrade.

``airflow33()`` returns that environment, building it the first time: a virtualenv made with ``uv``
from ``dev/airflow33/requirements.txt`` (Airflow 3.3.2 pinned with everything it needs, compiled
from ``requirements.in``). The virtualenv is cached under ``~/.cache/airflow-task-state/`` (or
``$AIRFLOW_TASK_STATE_CACHE``), named after a hash of the requirements and the interpreter, so a
change to either builds a new one and a machine that ran the tests before reuses it; uv's own
cache makes even a new one quick when the wheels are already downloaded.

This repository's distributions (the contract, airflow-task-state and the Redis provider) are
installed into it from the working tree whenever their files changed, so the tests always run the
code being tested; a file lock keeps two sessions from building or installing at the same time. The
test suites that run on Airflow 3.3 run in it too (``dev/test``).

``python -m state_testing.airflow33 ARGS`` (with ``dev`` on ``PYTHONPATH``) runs that environment's
Python with ARGS, e.g. ``-m pytest --db postgres tests/on_airflow33``.

Processes of this environment get an environment of their own (``Airflow33.env``): nothing of
the test run's Airflow configuration leaks into them except what the caller passes.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .airflow_cli import run_checked

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "dev" / "airflow33" / "requirements.txt"
AIRFLOW_VERSION = "3.3.2"
# Installed from the working tree, in this order (each needs the one before it).
LOCAL_DISTRIBUTIONS = ("shared/state", "airflow-core", "providers/redis")
# Written last: a directory without it is a build that was interrupted, and is built again.
COMPLETE_MARKER = ".complete"
# Names the working-tree content last installed, so that sessions running at the same time on an
# unchanged tree never reinstall packages under each other's running processes.
INSTALLED_MARKER = ".installed-tree"


def _cache_root() -> Path:
    configured = os.environ.get("AIRFLOW_TASK_STATE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-task-state"


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        raise RuntimeError("uv is not installed: run dev/setup")
    return found


def _base_python() -> str:
    """The interpreter this test run's virtualenv was made from (the same Python version)."""
    return os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Airflow33:
    root: Path
    #: Seconds spent building the virtualenv in this session (0.0 when the cache had it).
    build_seconds: float

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def env(self, database_url: str, home: Path, **extra: str) -> dict[str, str]:
        """A complete environment for an Airflow 3.3 process on *database_url*, with home *home*."""
        home.mkdir(parents=True, exist_ok=True)
        env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    def run(
        self, *command: str | Path, env: dict[str, str], check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run a program of this environment (``"airflow"``, ``"python"``)."""
        program, *args = command
        return run_checked(
            [self.bin(str(program)), *args],
            env=env,
            label=f"Airflow {AIRFLOW_VERSION}",
            check=check,
            timeout=timeout,
        )


def _environment_key() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(_base_python().encode())
    digest.update(b"compiled to bytecode")  # how _build installs: an environment built otherwise is rebuilt
    return digest.hexdigest()[:16]


def _build(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "--python", _base_python(), str(root)], check=True)
    # Compiled to bytecode as pip would: processes that run with PYTHONDONTWRITEBYTECODE write none.
    python = str(root / "bin" / "python")
    install = [uv, "pip", "install", "-q", "--compile-bytecode", "--python", python]
    subprocess.run([*install, "-r", str(REQUIREMENTS)], check=True)
    (root / COMPLETE_MARKER).write_text(AIRFLOW_VERSION)


def _tree_digest() -> str:
    digest = hashlib.sha256()
    for distribution in LOCAL_DISTRIBUTIONS:
        for path in sorted((REPO / distribution).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".venv" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _install_working_tree(root: Path) -> None:
    marker, tree = root / INSTALLED_MARKER, _tree_digest()
    if marker.exists() and marker.read_text() == tree:
        return
    # --reinstall: the working tree changes while the version numbers do not.
    command = [_uv(), "pip", "install", "-q", "--compile-bytecode", "--python", str(root / "bin" / "python")]
    command += ["--no-deps", "--reinstall", *(str(REPO / path) for path in LOCAL_DISTRIBUTIONS)]
    subprocess.run(command, check=True)
    marker.write_text(tree)


@functools.cache
def airflow33() -> Airflow33:
    """The Airflow 3.3 environment, built or reused, with this working tree's distributions in it."""
    root = _cache_root() / f"airflow-{AIRFLOW_VERSION}-{_environment_key()}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        built = not (root / COMPLETE_MARKER).exists()
        if built:
            _build(root)
        build_seconds = time.monotonic() - started if built else 0.0
        _install_working_tree(root)
    return Airflow33(root, build_seconds)


if __name__ == "__main__":
    environment = airflow33()
    os.execv(environment.python, [str(environment.python), *sys.argv[1:]])
