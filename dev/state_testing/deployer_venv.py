"""
A deployer's Airflow 3.2 environment, installed exactly the way the install documentation says.

``build_wheels(folder)`` runs ``dev/build-wheels``, the one command that builds every distribution.
``deployer_venv(root, wheels)`` makes a new virtualenv with ``uv venv`` and installs into it
``apache-airflow==<version>`` from PyPI, constrained by ``constraints/airflow-3.2.txt`` (the file
the documentation tells deployers to pass with ``-c``), plus the wheels of airflow-task-state and
airflow-state-contract: nothing of this working tree's environment. uv's cache keeps a repeated
install to a few seconds, so the environment is new on every run, as a deployer's would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_WHEELS = REPO / "dev" / "build-wheels"
CONSTRAINTS = REPO / "constraints" / "airflow-3.2.txt"
#: The Airflow release a new deployment installs; the dev lock stays on 3.2.1 (see the root pyproject).
AIRFLOW_VERSION = "3.2.2"
#: The distributions a 3.2 deployment installs from the built folder (normalized wheel name prefixes).
DEPLOYED = ("airflow_task_state", "airflow_state_contract")


def uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        raise RuntimeError("uv is not installed: run dev/setup")
    return found


def build_wheels(folder: Path) -> dict[str, Path]:
    """Build every distribution into *folder* with dev/build-wheels; return the wheels by name."""
    subprocess.run([str(BUILD_WHEELS), str(folder)], check=True, capture_output=True, text=True)
    wheels = {path.name.split("-")[0]: path for path in folder.glob("*.whl")}
    missing = [name for name in DEPLOYED if name not in wheels]
    if missing:
        raise AssertionError(f"dev/build-wheels built no wheel for {missing}: {sorted(folder.iterdir())}")
    return wheels


@dataclass(frozen=True)
class DeployerVenv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def pip_install(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """``pip install`` (uv's, which installs what pip would) into this environment; must succeed."""
        return self.uv_pip("install", "--compile-bytecode", *args)

    def uv_pip(self, command: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [uv(), "pip", command, "--python", str(self.python), *map(str, args)],
            capture_output=True,
            text=True,
            env={key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"},
        )
        if result.returncode != 0:
            raise AssertionError(f"`uv pip {command} {' '.join(map(str, args))}` failed:\n{result.stderr}")
        return result

    def version_of(self, distribution: str) -> str | None:
        result = subprocess.run(
            [str(self.python), "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
            capture_output=True,
            text=True,
        )
        return result.stdout.strip() if result.returncode == 0 else None


def deployer_venv(
    root: Path, wheels: dict[str, Path], airflow_version: str = AIRFLOW_VERSION
) -> DeployerVenv:
    """A new virtualenv at *root* with Airflow and our wheels, installed as documented."""
    subprocess.run([uv(), "venv", "-q", "--python", _base_python(), str(root)], check=True)
    venv = DeployerVenv(root)
    venv.pip_install(
        "-c", CONSTRAINTS, f"apache-airflow=={airflow_version}", *(wheels[name] for name in DEPLOYED)
    )
    return venv


def _base_python() -> str:
    """The interpreter this test run's virtualenv was made from (the same Python version)."""
    return os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]
