"""Where the backend finds its settings when Airflow builds it with no arguments."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from airflow_shared.state import TaskScope
from airflow_state_redis import RedisStateBackend, RedisStateConnectionError
from airflow_state_redis import _config as config
from airflow_state_redis._config import UNSET, Topology, resolve_settings, url_from_connection
from airflow_state_redis._errors import mask_url

# Looked up at collection, before the autouse fixture hides Airflow from the tests.
HAVE_AIRFLOW = importlib.util.find_spec("airflow") is not None


@pytest.fixture
def airflow_options(monkeypatch):
    """Pretend Airflow is installed with these ``[state_redis]`` options (a dict to fill in)."""
    options: dict[str, str] = {}
    monkeypatch.setattr(config, "_airflow_option", lambda name: options.get(name))
    return options


@pytest.fixture
def connections(monkeypatch):
    """Pretend Airflow holds these connections (a dict of conn_id -> connection to fill in)."""
    found: dict[str, SimpleNamespace] = {}
    monkeypatch.setattr(config, "_fetch_connection", lambda conn_id: found[conn_id])
    return found


def connection(**fields):
    defaults = {"host": None, "port": None, "login": None, "password": None, "schema": None}
    defaults.update(fields)
    defaults.setdefault("extra_dejson", {})
    return SimpleNamespace(**defaults)


def resolve(url=None, key_prefix=None, task_ttl_seconds=UNSET, asset_ttl_seconds=UNSET):
    return resolve_settings(url, key_prefix, task_ttl_seconds, asset_ttl_seconds)


# --- the URL: option, then connection, then environment --------------------------------------


def test_airflow_option_wins_over_connection_and_environment(airflow_options, connections, monkeypatch):
    airflow_options.update({"url": "redis://from-option/0", "redis_conn_id": "state"})
    connections["state"] = connection(host="from-connection")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "redis://from-env/0")
    settings = resolve()
    assert (settings.url, settings.url_source) == ("redis://from-option/0", "[state_redis] url")


def test_connection_wins_over_environment(airflow_options, connections, monkeypatch):
    airflow_options["redis_conn_id"] = "state"
    connections["state"] = connection(host="from-connection", port=6380, password="pw")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "redis://from-env/0")
    settings = resolve()
    assert settings.url == "redis://:pw@from-connection:6380/0"
    assert settings.url_source == "Airflow connection 'state'"


def test_environment_is_the_last_source(airflow_options, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "  redis://from-env/0  ")
    settings = resolve()
    assert (settings.url, settings.url_source) == ("redis://from-env/0", "AIRFLOW__STATE_REDIS__URL")


def test_an_explicit_url_never_consults_airflow(monkeypatch):
    def forbidden(name):
        raise AssertionError(f"looked up [state_redis] {name} although everything was given")

    monkeypatch.setattr(config, "_airflow_option", forbidden)
    settings = resolve_settings("redis://given/0", "given", 5, 6, Topology())
    assert (settings.url, settings.key_prefix, settings.task_ttl_seconds, settings.asset_ttl_seconds) == (
        "redis://given/0",
        "given",
        5,
        6,
    )


def test_without_airflow_the_environment_still_works(monkeypatch):
    # The autouse fixture makes `import airflow...` fail, as on a machine without Airflow.
    assert config._airflow_option("url") is None
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "redis://env-only/1")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__KEY_PREFIX", "env-prefix")
    backend = RedisStateBackend()
    assert backend._settings.url == "redis://env-only/1"
    assert backend._settings.key_prefix == "env-prefix"
    backend.close()


def test_nothing_configured_says_exactly_what_to_set():
    with pytest.raises(ValueError) as caught:
        RedisStateBackend()
    message = str(caught.value)
    assert "[state_redis] url" in message
    assert "AIRFLOW__STATE_REDIS__URL" in message
    assert "redis_conn_id" in message


def test_a_url_that_is_not_redis_is_refused_naming_its_source(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", "postgresql://user:hunter2@db/airflow")
    with pytest.raises(ValueError, match="AIRFLOW__STATE_REDIS__URL") as caught:
        resolve()
    assert "hunter2" not in str(caught.value)


# --- prefix and TTLs -----------------------------------------------------------------------


def test_defaults(monkeypatch):
    settings = resolve("redis://h/0")
    assert settings.key_prefix == "airflow:state"
    assert settings.task_ttl_seconds == 30 * 24 * 3600
    assert settings.asset_ttl_seconds is None


def test_options_come_from_airflow_before_the_environment(airflow_options, monkeypatch):
    airflow_options.update({"key_prefix": "cfg", "task_ttl_seconds": "120", "asset_ttl_seconds": "60"})
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__KEY_PREFIX", "env")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__TASK_TTL_SECONDS", "999")
    settings = resolve("redis://h/0")
    assert (settings.key_prefix, settings.task_ttl_seconds, settings.asset_ttl_seconds) == ("cfg", 120, 60)


def test_options_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__KEY_PREFIX", "env")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__TASK_TTL_SECONDS", "0")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__ASSET_TTL_SECONDS", "86400")
    settings = resolve("redis://h/0")
    assert (settings.key_prefix, settings.task_ttl_seconds, settings.asset_ttl_seconds) == (
        "env",
        None,
        86400,
    )


def test_explicit_arguments_win_and_zero_or_none_means_no_expiry(airflow_options):
    airflow_options.update({"task_ttl_seconds": "120", "asset_ttl_seconds": "60"})
    assert resolve("redis://h/0", task_ttl_seconds=0).task_ttl_seconds is None
    assert resolve("redis://h/0", task_ttl_seconds=None).task_ttl_seconds is None
    assert resolve("redis://h/0", asset_ttl_seconds=None).asset_ttl_seconds is None
    assert resolve("redis://h/0", asset_ttl_seconds=7).asset_ttl_seconds == 7


@pytest.mark.parametrize("value", ["-1", "ten", "1.5"])
def test_a_bad_ttl_is_refused_naming_its_source(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__TASK_TTL_SECONDS", value)
    with pytest.raises(ValueError, match="AIRFLOW__STATE_REDIS__TASK_TTL_SECONDS"):
        resolve("redis://h/0")


@pytest.mark.parametrize("prefix", ["", "has{brace", "has}brace"])
def test_a_prefix_that_would_break_the_layout_is_refused(prefix):
    with pytest.raises(ValueError, match="key_prefix"):
        resolve("redis://h/0", key_prefix=prefix)


# --- connections and masking ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"host": "h"}, "redis://h:6379/0"),
        ({"host": "h", "port": 7000, "extra_dejson": {"db": 3}}, "redis://h:7000/3"),
        ({"host": "h", "schema": "5"}, "redis://h:6379/5"),
        ({"host": "h", "extra_dejson": {"ssl": True}}, "rediss://h:6379/0"),
        ({"host": "h", "extra_dejson": {"ssl": "false"}}, "redis://h:6379/0"),
        ({"host": "h", "login": "app", "password": "p@ss:w/rd"}, "redis://app:p%40ss%3Aw%2Frd@h:6379/0"),
        ({"host": "::1", "password": "x"}, "redis://:x@[::1]:6379/0"),
        ({}, "redis://localhost:6379/0"),
    ],
    ids=["host", "port-db", "schema-db", "ssl", "ssl-false", "quoting", "ipv6", "empty"],
)
def test_url_from_connection(fields, expected):
    assert url_from_connection(connection(**fields)) == expected


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:secret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:secret@h/0", "redis://user:***@h/0"),
        ("redis://secret@h/0", "redis://***@h/0"),
        ("rediss://h:6380/0", "rediss://h:6380/0"),
        ("unix:///tmp/redis.sock?db=1&password=secret", "unix:///tmp/redis.sock?db=1&password=***"),
        ("redis://:pa/ss@w@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://h/0?password=secret#x", "redis://h/0?password=***#x"),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


def test_settings_repr_masks_the_password():
    assert "secret" not in repr(resolve("redis://:secret@h/0", key_prefix="p"))


# --- with the real Airflow (in a subprocess, so this process never imports it) ---------------

_PROBE = textwrap.dedent(
    """
    import json, os
    from airflow_state_redis._config import UNSET, resolve_settings

    def probe():
        s = resolve_settings(None, None, UNSET, UNSET)
        return [s.url, s.url_source, s.key_prefix, s.task_ttl_seconds, s.asset_ttl_seconds]

    via_connection = probe()
    # Airflow reads AIRFLOW__STATE_REDIS__URL as [state_redis] url, which beats the connection.
    os.environ["AIRFLOW__STATE_REDIS__URL"] = "redis://env-host:6392/5"
    via_option = probe()
    print(json.dumps([via_connection, via_option]))
    """
)


@pytest.mark.skipif(not HAVE_AIRFLOW, reason="Airflow is not installed")
def test_real_airflow_configuration_and_connection(tmp_path):
    (tmp_path / "airflow.cfg").write_text(
        "[state_redis]\nredis_conn_id = state_conn\nkey_prefix = from-cfg\ntask_ttl_seconds = 60\n"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW__STATE_REDIS__")}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW_CONFIG": str(tmp_path / "airflow.cfg"),
            "AIRFLOW_CONN_STATE_CONN": "redis://:conn-secret@conn-host:6391/4",
        }
    )
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    via_connection, via_option = json.loads(result.stdout.strip().splitlines()[-1])
    assert via_connection == [
        "redis://:conn-secret@conn-host:6391/4",
        "Airflow connection 'state_conn'",
        "from-cfg",
        60,
        None,
    ]
    assert via_option == ["redis://env-host:6392/5", "[state_redis] url", "from-cfg", 60, None]


# --- topology: [state_redis] mode, sentinel_*, wait_replicas, retries -------------------------


def test_mode_defaults_to_standalone_and_reads_every_topology_option(airflow_options):
    assert config.resolve_topology() == Topology()
    airflow_options.update(
        {
            "mode": "Sentinel",
            "sentinel_master": "mymaster",
            "sentinels": " s1:26379, [::1]:26380 ",
            "sentinel_username": "watcher",
            "sentinel_password": "sentinel-secret",
            "wait_replicas": "1",
            "wait_timeout_ms": "250",
            "retries": "3",
        }
    )
    topology = config.resolve_topology()
    assert topology == Topology(
        mode="sentinel",
        sentinel_master="mymaster",
        sentinels=(("s1", 26379), ("::1", 26380)),
        sentinel_username="watcher",
        sentinel_password="sentinel-secret",
        wait_replicas=1,
        wait_timeout_ms=250,
        retries=3,
    )
    assert "sentinel-secret" not in repr(topology)
    settings = resolve()  # sentinel mode needs no URL: the sentinels say where the primary is
    assert "sentinel-secret" not in repr(settings)


def test_the_environment_sets_the_topology_too(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__MODE", "cluster")
    monkeypatch.setenv("AIRFLOW__STATE_REDIS__WAIT_REPLICAS", "2")
    assert config.resolve_topology() == Topology(mode="cluster", wait_replicas=2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "replicated"}, r"\[state_redis\] mode must be one of standalone, cluster, sentinel"),
        ({"mode": "sentinel"}, r"sentinel_master and sentinels are not set"),
        (
            {"mode": "sentinel", "sentinels": "s1:26379"},
            r"mode is sentinel but \[state_redis\] sentinel_master is",
        ),
        ({"mode": "sentinel", "sentinel_master": "m"}, r"\[state_redis\] sentinels is not set"),
        ({"sentinel_master": "m"}, r"sentinel_master only apply with \[state_redis\] mode = sentinel"),
        ({"mode": "cluster", "sentinels": "s:1"}, r"sentinels only apply .* but mode is cluster"),
        ({"mode": "sentinel", "sentinel_master": "m", "sentinels": "s1"}, r"'s1' is not host:port"),
        ({"mode": "sentinel", "sentinel_master": "m", "sentinels": "s1:0"}, r"'s1:0' is not host:port"),
        ({"mode": "sentinel", "sentinel_master": "m", "sentinels": " , "}, r"lists no sentinel"),
        ({"wait_replicas": "-1"}, r"\[state_redis\] wait_replicas must be at least 0, got -1"),
        ({"wait_replicas": "two"}, r"\[state_redis\] wait_replicas must be a whole number, got 'two'"),
        ({"wait_timeout_ms": "0"}, r"\[state_redis\] wait_timeout_ms must be at least 1"),
        ({"retries": "many"}, r"\[state_redis\] retries must be a whole number"),
    ],
)
def test_bad_topology_options_name_the_option_and_the_fix(airflow_options, options, message):
    airflow_options.update({"url": "redis://:hunter2@h:6379/0", **options})
    with pytest.raises(ValueError, match=message) as caught:
        resolve()
    assert "hunter2" not in str(caught.value)


def test_a_cluster_cannot_be_a_unix_socket():
    with pytest.raises(ValueError, match=r"mode is cluster but the Redis URL .* is a unix socket"):
        resolve_settings("unix:///tmp/redis.sock", None, UNSET, UNSET, Topology(mode="cluster"))


def test_building_a_cluster_or_sentinel_backend_does_no_io():
    # Nothing listens on these ports: construction must still succeed (Airflow builds the backend
    # at import and in `airflow config`), and the first call fails with the password masked.
    for topology in (
        Topology(mode="cluster", retries=0),
        Topology(mode="sentinel", sentinel_master="m", sentinels=(("127.0.0.1", 1),), retries=0),
    ):
        backend = RedisStateBackend("redis://:hunter2@127.0.0.1:1/0", key_prefix="p", topology=topology)
        assert "hunter2" not in repr(backend)
        with pytest.raises(RedisStateConnectionError) as caught:
            backend.get(TaskScope("d", "r", "t", dag_run_uid="1.1"), "k")
        assert "hunter2" not in str(caught.value)
        backend.close()


def test_provider_info_declares_every_option_the_backend_reads():
    from airflow_state_redis.provider_info import get_provider_info

    declared = get_provider_info()["config"]["state_redis"]["options"]
    read = {"url", "redis_conn_id", "key_prefix", "task_ttl_seconds", "asset_ttl_seconds"}
    read |= {"mode", "sentinel_master", "sentinels", "sentinel_username", "sentinel_password"}
    read |= {"wait_replicas", "wait_timeout_ms", "retries"}
    assert set(declared) == read
    assert declared["sentinel_password"].get("sensitive") is True


@pytest.mark.any_database
def test_airflow_config_list_shows_the_defaults_the_backend_applies():
    from airflow_state_redis import _config
    from state_testing.airflow_cli import run_airflow

    listed = run_airflow("config", "list", "--section", "state_redis", "--show-values").stdout
    values = dict(
        line.split(" = ", 1) for line in listed.splitlines() if " = " in line and not line.startswith("#")
    )
    assert values == {
        "key_prefix": _config.DEFAULT_KEY_PREFIX,
        "task_ttl_seconds": str(_config.DEFAULT_TASK_TTL_SECONDS),
        "asset_ttl_seconds": "0",  # asset state never expires unless told to
        "mode": "standalone",
        "wait_replicas": "0",
        "wait_timeout_ms": str(_config.DEFAULT_WAIT_TIMEOUT_MS),
        "retries": str(_config.DEFAULT_RETRIES),
    }
    # Without a default, an option is listed commented out, as Airflow lists its own.
    assert "# url = \n" in listed and "# redis_conn_id = \n" in listed
