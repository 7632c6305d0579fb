"""Every setting is read in airflow.state.config, with the defaults the provider info declares."""

from __future__ import annotations

import pytest
from airflow.configuration import conf
from airflow.state import StateConfigurationError, StateUnavailableError, config
from airflow.state.state_options import STATE_OPTIONS

# Runs in the SQLite pass only: configuration is read without the metadata database.
pytestmark = pytest.mark.any_database


@pytest.fixture(autouse=True)
def _no_process_key(monkeypatch):
    """Each test starts without the in-process key, and leaves none behind for later tests."""
    from airflow.state.api import signing_keys

    monkeypatch.setattr(signing_keys, "_process_key", None)


@pytest.fixture
def no_url(monkeypatch):
    """None of the three options that locate the state API is set."""
    for name in ("STATE__API_URL", "CORE__EXECUTION_API_SERVER_URL", "API__BASE_URL"):
        monkeypatch.setenv(f"AIRFLOW__{name}", "")


def test_defaults_come_from_the_provider_info():
    assert config.backend_path() == STATE_OPTIONS["backend"]["default"]
    assert config.backend_path() == "airflow.state.metastore.MetastoreStateBackend"
    assert config.max_value_bytes() == int(STATE_OPTIONS["max_value_bytes"]["default"]) == 65536


def test_defaults_when_airflow_has_not_loaded_the_providers_configuration(monkeypatch):
    """Some processes read configuration before provider defaults are loaded: the dict answers."""

    def not_loaded(section, key, fallback=None, **kwargs):
        assert section == "state"
        return fallback

    monkeypatch.setattr(conf, "get", not_loaded)
    assert config.backend_path() == STATE_OPTIONS["backend"]["default"]
    assert config.max_value_bytes() == int(STATE_OPTIONS["max_value_bytes"]["default"])
    # The dict is the one place: change it and the fallback follows (no second literal to drift).
    monkeypatch.setitem(STATE_OPTIONS["max_value_bytes"], "default", "1234")
    assert config.max_value_bytes() == 1234


def test_each_option_reads_its_environment_variable(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", " my_company.state.Backend ")
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "s" * 64)
    monkeypatch.setenv("AIRFLOW__STATE__PREVIOUS_SESSION_KEY", "p" * 64)
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "https://state.example/state/")
    assert config.backend_path() == "my_company.state.Backend"
    assert config.max_value_bytes() == 100
    assert (config.session_key(), config.previous_session_key()) == ("s" * 64, "p" * 64)
    assert config.api_url() == "https://state.example/state"


def test_database_pool_size_defaults_to_the_provider_info_and_reads_its_variable(monkeypatch):
    assert config.database_pool_size() == int(STATE_OPTIONS["database_pool_size"]["default"])
    monkeypatch.setenv("AIRFLOW__STATE__DATABASE_POOL_SIZE", "7")
    assert config.database_pool_size() == 7


@pytest.mark.parametrize("option", ["max_value_bytes", "max_batch_bytes", "database_pool_size"])
@pytest.mark.parametrize("text", ["64k", "0", "-5"])
def test_a_size_limit_that_is_not_a_positive_number_names_the_option(monkeypatch, option, text):
    monkeypatch.setenv(f"AIRFLOW__STATE__{option.upper()}", text)
    with pytest.raises(
        StateConfigurationError, match=rf"\[state\] {option} must be a positive integer, not '{text}'"
    ):
        getattr(config, option)()


def test_api_url_falls_back_to_the_execution_api_url(monkeypatch, no_url):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://ignored:1/")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://api:8080/execution/")
    assert config.api_url() == "http://api:8080/state"
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "https://proxy.example/airflow/execution")
    assert config.api_url() == "https://proxy.example/airflow/state"


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://airflow.example.com", "https://airflow.example.com/state"),
        ("https://airflow.example.com/team-a/", "https://airflow.example.com/team-a/state"),
        # Relative, as Airflow's executors read it: the API server on localhost:8080.
        ("/", "http://localhost:8080/state"),
        ("/airflow", "http://localhost:8080/airflow/state"),
    ],
)
def test_api_url_falls_back_to_the_api_base_url_as_airflow_does(monkeypatch, no_url, base_url, expected):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", base_url)
    assert config.api_url() == expected


def test_api_url_base_url_fallback_matches_airflows_execution_api_url(monkeypatch, no_url):
    """The same [api] base_url gives Airflow's Execution API and our state API side by side."""
    import inspect

    from airflow.sdk.execution_time import execute_workload

    # Airflow builds its default Execution API URL from [api] base_url in this function; we mirror it.
    assert 'conf.get("api", "base_url", fallback="/")' in inspect.getsource(execute_workload)
    assert 'f"http://localhost:8080{base_url}"' in inspect.getsource(execute_workload)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "/sub")
    assert config.api_url() == "http://localhost:8080/sub/state"


def test_api_url_without_any_option_names_them_all(no_url):
    with pytest.raises(StateConfigurationError) as raised:
        config.api_url()
    message = str(raised.value)
    for option in ("[state] api_url", "[core] execution_api_server_url", "[api] base_url"):
        assert option in message
    assert isinstance(raised.value, StateUnavailableError)


def test_in_process_serving_needs_no_key_and_leaves_the_configuration_alone(monkeypatch):
    """
    A client serving the state app to itself (as under `airflow dags test`) signs with a key only
    this process has, and the app accepts it, in this same process, with no key configured at all.
    The task instance does not exist, so the app's answer is a 403 `forbidden`, which proves the
    credential was accepted (a key mismatch would be a 401, no key a 503).
    """
    from types import SimpleNamespace

    import airflow.state.plugin  # noqa: F401 (as Airflow loads it: it serves the state API in-process)
    from airflow.state import StateAccessDeniedError
    from airflow.state.api.signing_keys import forget_configured_keys
    from airflow.state.worker import client

    for option in ("STATE__SESSION_KEY", "API_AUTH__JWT_SECRET", "API_AUTH__JWT_PRIVATE_KEY_PATH"):
        monkeypatch.setenv(f"AIRFLOW__{option}", "")
    forget_configured_keys()
    monkeypatch.setattr(client, "_in_process", lambda: True)
    ti = SimpleNamespace(
        id="01234567-89ab-7def-8123-456789abcdef",
        dag_id="d",
        run_id="r",
        task_id="t",
        map_index=-1,
        try_number=1,
    )
    state_client = client.StateClient(ti)
    assert state_client.in_process
    with pytest.raises(StateAccessDeniedError, match=r"403 \(forbidden\).*does not exist"):
        state_client.request("GET", f"/task-instances/{ti.id}/keys")
    assert conf.get("state", "session_key", fallback="") == ""
    assert conf.get("api_auth", "jwt_secret", fallback="") == ""


def test_retry_settings_and_timeout_are_the_workers_settings(monkeypatch):
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRIES", "7")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", "0.5")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX", "30")
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", "12.5")
    policy = config.RetryPolicy.from_config()
    assert (policy.retries, policy.wait_min, policy.wait_max) == (7, 0.5, 30.0)
    assert config.request_timeout() == 12.5
