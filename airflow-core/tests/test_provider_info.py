"""Installing the distribution is all a deployer does: Airflow discovers it as a provider."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

import jsonschema
from airflow.state.provider_info import get_provider_info
from state_testing.airflow_cli import run_airflow


def test_provider_info_is_valid_against_airflows_schema():
    import airflow

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))


def test_package_name_is_the_distribution_name():
    info = get_provider_info()
    assert distribution(info["package-name"]).name == "airflow-task-state"
    (entry_point,) = [
        ep for ep in distribution("airflow-task-state").entry_points if ep.group == "apache_airflow_provider"
    ]
    assert entry_point.load() is get_provider_info


def test_airflow_lists_the_provider():
    assert "airflow-task-state" in run_airflow("providers", "list").stdout


def test_state_backend_default_is_declared_and_overridable():
    default = run_airflow("config", "get-value", "state", "backend").stdout.strip()
    assert default == "airflow.state.metastore.MetastoreStateBackend"

    import os

    os.environ["AIRFLOW__STATE__BACKEND"] = "my_company.state.OtherBackend"
    try:
        overridden = run_airflow("config", "get-value", "state", "backend").stdout.strip()
    finally:
        del os.environ["AIRFLOW__STATE__BACKEND"]
    assert overridden == "my_company.state.OtherBackend"


def test_cli_group_is_registered():
    assert "state-db" in run_airflow("--help").stdout
