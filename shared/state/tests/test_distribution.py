"""The promises that let a provider depend on this distribution alone."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"
REPOSITORY = Path(__file__).parents[3]
MEMBERS = ("shared/state", "airflow-core", "providers/redis")


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


def test_every_distribution_claims_only_the_python_it_is_tested_on():
    # CI runs Python 3.11, and the tests need it (tomllib is 3.11+): no member may claim 3.10.
    for member in MEMBERS:
        project = tomllib.loads((REPOSITORY / member / "pyproject.toml").read_text())["project"]
        assert project["requires-python"] == ">=3.11", member
    tools = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]
    assert tools["ruff"]["target-version"] == "py311"
    assert tools["mypy"]["python_version"] == "3.11"
