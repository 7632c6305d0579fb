"""Every setting is read in airflow_task_state.config, with the defaults the provider info declares."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.configuration import conf
from airflow_task_state import StateConfigurationError, config
from airflow_task_state.state_options import STATE_OPTIONS

# Runs in the SQLite pass only: configuration is read without the metadata database.
pytestmark = pytest.mark.any_database


@pytest.fixture(autouse=True)
def _no_process_key(monkeypatch):
    """Each test starts without the in-process key, and leaves none behind for later tests."""
    from airflow_task_state.api import signing_keys

    monkeypatch.setattr(signing_keys, "_process_key", None)


@pytest.fixture(autouse=True)
def _nothing_read_yet(monkeypatch):
    """Options are read once per process while their environment stays: each test reads afresh."""
    monkeypatch.setattr(config, "_read", {})


@pytest.fixture
def no_url(monkeypatch):
    """None of the three options that locate the state API is set."""
    for name in ("STATE__API_URL", "CORE__EXECUTION_API_SERVER_URL", "API__BASE_URL"):
        monkeypatch.setenv(f"AIRFLOW__{name}", "")


def test_defaults_come_from_the_provider_info():
    assert config.backend_path() == STATE_OPTIONS["backend"]["default"]
    assert config.backend_path() == "airflow_task_state.metastore.MetastoreStateBackend"
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
    config._read.clear()  # read once per process: the dict changes only here
    assert config.max_value_bytes() == 1234


def test_an_option_read_once_is_read_again_when_its_environment_changes(monkeypatch):
    """Read once per process (Airflow's conf.get is slow), but never stale for a changed variable."""
    default = config.max_value_bytes()
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    assert config.max_value_bytes() == 100
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://one/state")
    assert config.api_url() == "http://one/state"
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://two/state")
    assert config.api_url() == "http://two/state"
    monkeypatch.setenv("AIRFLOW__WORKERS__EXECUTION_API_RETRIES", "2")
    assert config.RetryPolicy.from_config().retries == 2
    monkeypatch.delenv("AIRFLOW__STATE__MAX_VALUE_BYTES")
    assert config.max_value_bytes() == default


def test_a_parsed_option_follows_its_text_and_a_wrong_text_is_refused_every_time(monkeypatch):
    """What an option's text parses to is kept per text: never stale, and never a refusal forgotten."""
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "2d")
    assert config.default_task_retention() == timedelta(days=2)
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "3h")
    assert config.default_task_retention() == timedelta(hours=3)
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "soon")
    for _ in range(2):
        with pytest.raises(StateConfigurationError, match=r"\[state\] default_task_retention"):
            config.default_task_retention()
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "2d")
    assert config.default_task_retention() == timedelta(days=2)
    monkeypatch.setenv("AIRFLOW__STATE__CLEAR_ON_SUCCESS", "yes")
    assert config.clear_on_success() is True
    monkeypatch.setenv("AIRFLOW__STATE__CLEAR_ON_SUCCESS", "off")
    assert config.clear_on_success() is False


def test_a_backend_configured_by_the_import_path_of_0_7_names_the_same_class(monkeypatch):
    """0.7 and earlier lived in airflow.state, which is Airflow's own package on 3.3: a deployment's
    configuration keeps working on both lines."""
    from airflow_task_state.configured_backend import resolve_state_backend
    from airflow_task_state.metastore import MetastoreStateBackend

    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "airflow.state.metastore.MetastoreStateBackend")
    assert config.backend_path() == "airflow_task_state.metastore.MetastoreStateBackend"
    assert resolve_state_backend() is MetastoreStateBackend


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


# Each way a deployment tells Airflow where its API server is: ([api] base_url,
# [core] execution_api_server_url) (None: not set), and where the state API then is.
SHAPES = {
    "nothing set: airflow standalone, a first api-server": (None, None, "http://localhost:8080/state"),
    "base_url, another host": ("https://airflow.example.com", None, "https://airflow.example.com/state"),
    "base_url, another port": ("http://127.0.0.1:9091", None, "http://127.0.0.1:9091/state"),
    "base_url with a path, behind a proxy": (
        "https://example.com/airflow/",
        None,
        "https://example.com/airflow/state",
    ),
    "relative base_url /": ("/", None, "http://localhost:8080/state"),
    "relative base_url with a path": ("/airflow", None, "http://localhost:8080/airflow/state"),
    "execution URL, trailing slash": (None, "http://api:9090/execution/", "http://api:9090/state"),
    "execution URL, no trailing slash": (None, "http://api:9090/execution", "http://api:9090/state"),
    "execution URL with a path, which wins over base_url": (
        "https://ignored.example",
        "https://proxy.example/airflow/execution/",
        "https://proxy.example/airflow/state",
    ),
}


def _deploy(monkeypatch, base_url: str | None, execution_url: str | None) -> None:
    monkeypatch.delenv("AIRFLOW__STATE__API_URL", raising=False)
    for name, value in (("API__BASE_URL", base_url), ("CORE__EXECUTION_API_SERVER_URL", execution_url)):
        if value is None:
            monkeypatch.delenv(f"AIRFLOW__{name}", raising=False)
        else:
            monkeypatch.setenv(f"AIRFLOW__{name}", value)
    assert conf.get("api", "base_url", fallback=None) == base_url  # no airflow.cfg of the tests sets them
    assert conf.get("core", "execution_api_server_url", fallback=None) == execution_url


@pytest.mark.parametrize(("base_url", "execution_url", "expected"), SHAPES.values(), ids=SHAPES.keys())
def test_api_url_in_each_shape_of_deployment(monkeypatch, base_url, execution_url, expected):
    _deploy(monkeypatch, base_url, execution_url)
    assert config.api_url() == expected


def _execution_api_of_local_executor() -> str:
    """Where Airflow's LocalExecutor (``airflow standalone``'s) sends a try to the Execution API."""
    from types import SimpleNamespace

    from airflow.executors import local_executor
    from airflow.executors.base_executor import ExecutorConf
    from airflow.sdk.execution_time import supervisor

    called = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervisor, "supervise", lambda **kwargs: called.update(kwargs))
        patch.setattr(local_executor, "setproctitle", lambda *args: None)
        fields = {"dag_rel_path": "", "bundle_info": None, "token": "", "log_path": None}
        local_executor._execute_work(
            None, SimpleNamespace(ti=SimpleNamespace(id="ti"), **fields), ExecutorConf()
        )
    return called["server"]


def _execution_api_of_kubernetes_pod() -> str:
    """Where a KubernetesExecutor pod (``python -m airflow.sdk.execution_time.execute_workload``) sends it."""
    import airflow.sdk.log
    import airflow.settings
    from airflow.executors.workloads import ExecuteTask
    from airflow.sdk.execution_time import execute_workload, supervisor

    called = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervisor, "supervise", lambda **kwargs: called.update(kwargs))
        patch.setattr(airflow.sdk.log, "configure_logging", lambda **kwargs: None)  # the pod's stdout
        patch.setattr(airflow.settings, "dispose_orm", lambda **kwargs: None)
        fields = {"ti": None, "dag_rel_path": "", "bundle_info": None, "token": "", "log_path": None}
        execute_workload.execute_workload(ExecuteTask.model_construct(**fields))
    return called["server"]


def _execution_api_of_celery_worker() -> str:
    """Where a Celery worker sends it (the provider's path for Airflow before 3.3)."""
    import uuid
    from types import SimpleNamespace

    from airflow.executors.workloads import BundleInfo, ExecuteTask, TaskInstanceDTO
    from airflow.providers.celery.executors import celery_executor_utils
    from airflow.sdk.execution_time import supervisor

    ids = {"id": uuid.uuid4(), "dag_version_id": uuid.uuid4(), "dag_id": "d", "run_id": "r", "task_id": "t"}
    ti = TaskInstanceDTO(**ids, try_number=1, pool_slots=1, queue="default", priority_weight=1)
    workload = ExecuteTask(
        ti=ti, dag_rel_path="d.py", bundle_info=BundleInfo(name="b"), token="", log_path=None
    )
    called = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervisor, "supervise", lambda **kwargs: called.update(kwargs))
        running = SimpleNamespace(current_task=SimpleNamespace(request=SimpleNamespace(id="celery-task")))
        patch.setattr(celery_executor_utils, "app", running)
        celery_executor_utils._execute_workload_pre_3_3(workload.model_dump_json())
    return called["server"]


@pytest.mark.parametrize(
    "airflow_sends_to",
    (_execution_api_of_local_executor, _execution_api_of_celery_worker, _execution_api_of_kubernetes_pod),
)
@pytest.mark.parametrize(("base_url", "execution_url", "expected"), SHAPES.values(), ids=SHAPES.keys())
def test_api_url_is_beside_the_execution_api_airflow_itself_uses(
    monkeypatch, airflow_sends_to, base_url, execution_url, expected
):
    """Airflow's own executors, run in each shape, send a try to <base>/execution; ours is <base>/state."""
    _deploy(monkeypatch, base_url, execution_url)
    execution_api = airflow_sends_to().rstrip("/")
    assert execution_api.endswith("/execution")
    assert config.api_url() == execution_api.removesuffix("/execution") + "/state" == expected


def test_api_url_set_wins_over_airflows_urls(monkeypatch):
    _deploy(monkeypatch, "https://ignored.example", "http://ignored:9090/execution/")
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", " https://state.example/state/ ")
    assert config.api_url() == "https://state.example/state"


def test_api_url_options_set_empty_count_as_not_set(no_url):
    """``AIRFLOW__API__BASE_URL=`` is no base URL: Airflow's own default, not a relative ``/state``."""
    assert config.api_url() == "http://localhost:8080/state"


def test_in_process_serving_needs_no_key_and_leaves_the_configuration_alone(monkeypatch):
    """
    A client serving the state app to itself (as under `airflow dags test`) signs with a key only
    this process has, and the app accepts it, in this same process, with no key configured at all.
    The task instance does not exist, so the app's answer is a 403 `forbidden`, which proves the
    credential was accepted (a key mismatch would be a 401, no key a 503).
    """
    from types import SimpleNamespace

    import airflow_task_state.plugin  # noqa: F401 (as Airflow loads it: it serves the state API in-process)
    from airflow_task_state import StateAccessDeniedError
    from airflow_task_state.api.signing_keys import forget_configured_keys
    from airflow_task_state.worker import client

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
