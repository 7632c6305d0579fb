"""
The check behind the message every `airflow` command prints when Airflow 3.3 was installed over
this distribution (tests/test_install_from_wheels.py proves it on a real 3.3.2 install).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from airflow.state import overinstall

# Runs in the SQLite pass only: reads files and package metadata, never the database.
pytestmark = pytest.mark.any_database


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overinstall, "_warned", False)


def test_a_healthy_airflow_32_environment_prints_nothing():
    assert not overinstall.AIRFLOW33_MODULE.exists()
    stream = io.StringIO()
    overinstall.warn_if_airflow_installed_over_us(stream)
    assert stream.getvalue() == ""


def test_airflow33s_module_beside_ours_prints_the_repair_once(monkeypatch, tmp_path: Path):
    airflow33_module = tmp_path / "metastore.py"
    airflow33_module.write_text("")
    monkeypatch.setattr(overinstall, "AIRFLOW33_MODULE", airflow33_module)
    monkeypatch.setattr(overinstall.metadata, "version", lambda name: "3.3.2")
    stream = io.StringIO()

    overinstall.warn_if_airflow_installed_over_us(stream)
    overinstall.warn_if_airflow_installed_over_us(stream)  # ProvidersManager asks more than once

    message = stream.getvalue()
    assert message.count("was installed over airflow-task-state") == 1
    # This environment's installer, never a bare `pip` that may be another Python's: its pip, or
    # uv's pointed at it when it has none (tests/test_install_from_wheels.py runs what it prints).
    commands = [line.strip() for line in message.splitlines() if line.startswith("    ")]
    assert commands[0].endswith(" airflow-task-state")
    assert commands[1].endswith(' --force-reinstall --no-deps "apache-airflow-core==3.3.2"')
    for command in commands:
        assert command.startswith((f"{sys.executable} -m pip ", "uv pip ")) and sys.executable in command
