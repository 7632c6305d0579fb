"""Installing the distribution is all a deployer does: Airflow discovers it as a provider."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

import jsonschema
import pytest
from airflow_task_state.provider_info import get_provider_info
from airflow_task_state.state_options import STATE_OPTIONS
from state_testing.airflow_cli import run_airflow

# What Airflow makes of our package and settings, whatever database it uses: the SQLite pass only.
pytestmark = pytest.mark.any_database


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


def test_state_backend_default_is_declared_and_overridable(monkeypatch):
    default = run_airflow("config", "get-value", "state", "backend").stdout.strip()
    assert (
        default == STATE_OPTIONS["backend"]["default"] == "airflow_task_state.metastore.MetastoreStateBackend"
    )

    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "my_company.state.OtherBackend")
    overridden = run_airflow("config", "get-value", "state", "backend").stdout.strip()
    assert overridden == "my_company.state.OtherBackend"


def test_config_list_shows_our_defaults_as_airflow_shows_its_own(monkeypatch):
    """
    `airflow config list` hides every value unless given --show-values (it says so on stderr), for
    Airflow's own options as for ours; with it (and --defaults) our defaults appear, and an
    option without a default is commented out, as Airflow's own are.
    """
    monkeypatch.delenv("AIRFLOW__STATE__API_URL", raising=False)
    monkeypatch.delenv("AIRFLOW__STATE__MAX_VALUE_BYTES", raising=False)
    monkeypatch.delenv("AIRFLOW__STATE__BACKEND", raising=False)
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "s" * 64)
    monkeypatch.setenv("AIRFLOW__STATE__PREVIOUS_SESSION_KEY", "p" * 64)

    hidden = run_airflow("config", "list", "--section", "state")
    assert "Values are hidden by default" in hidden.stderr
    airflows_own = run_airflow("config", "list", "--section", "workers").stdout
    assert "# execution_api_retries = \n" in airflows_own  # Airflow's own default, hidden alike
    assert "# backend = \n" in hidden.stdout

    shown = run_airflow("config", "list", "--section", "state", "--show-values", "--hide-sensitive").stdout
    assert f"\nbackend = {STATE_OPTIONS['backend']['default']}\n" in shown
    assert f"\nmax_value_bytes = {STATE_OPTIONS['max_value_bytes']['default']}\n" in shown
    assert "\nsession_key = < hidden >\n" in shown and "\nprevious_session_key = < hidden >\n" in shown
    assert "\n# api_url = \n" in shown  # not set, no default: as Airflow's execution_api_server_url
    core = run_airflow("config", "list", "--section", "core", "--show-values").stdout
    assert "\n# execution_api_server_url = \n" in core

    defaults = run_airflow("config", "list", "--section", "state", "--defaults", "--show-values").stdout
    assert f"# backend = {STATE_OPTIONS['backend']['default']}\n" in defaults
    assert "# max_value_bytes = 65536\n" in defaults
    assert "# Example: api_url = http://airflow-api-server:8080/state\n" in defaults
    assert "# Variable: AIRFLOW__STATE__MAX_VALUE_BYTES\n" in defaults
    # Descriptions wrap as Airflow's own do in config.yml, not as one line of 200 characters.
    assert max(len(line) for line in defaults.splitlines()) <= 100


def test_cli_group_is_registered():
    assert "state-db" in run_airflow("--help").stdout
