"""The promises that let a provider depend on this distribution alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"


def test_has_no_runtime_dependencies():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["dependencies"] == []


def test_importing_never_imports_airflow():
    code = (
        "import sys, airflow_shared.state, airflow_shared.state.testing;"
        "leaked = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'));"
        "print(leaked); sys.exit(1 if leaked else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
