"""`[state] backend` chooses the backend the way `[core] xcom_backend` chooses XCom's class."""

from __future__ import annotations

import threading

import pytest
from airflow_shared.state import BaseStateBackend
from airflow_task_state import get_state_backend, resolve_state_backend
from airflow_task_state.configured_backend import reset_state_backend
from airflow_task_state.metastore import MetastoreStateBackend

# Runs in the SQLite pass only: which class [state] backend names does not depend on the metadata database.
pytestmark = pytest.mark.any_database


class CountingBackend(BaseStateBackend):
    """A backend that counts its instances, to prove the cached instance is built once."""

    instances = 0
    _lock = threading.Lock()

    def __init__(self) -> None:
        with CountingBackend._lock:
            CountingBackend.instances += 1

    def get(self, scope, key, *, session=None):
        return None

    def set(self, scope, key, value, *, session=None):
        pass

    def delete(self, scope, key, *, session=None):
        pass

    def clear(self, scope, *, all_map_indices=False, session=None):
        pass


class NotABackend:
    pass


@pytest.fixture(autouse=True)
def _fresh_backend_cache():
    reset_state_backend()
    yield
    reset_state_backend()


def test_default_is_the_metastore():
    assert resolve_state_backend() is MetastoreStateBackend
    assert isinstance(get_state_backend(), MetastoreStateBackend)


def test_default_is_the_one_the_provider_info_declares(monkeypatch):
    """Without provider configuration loaded, the default still comes from the provider info."""
    from airflow.configuration import conf
    from airflow_task_state import config
    from airflow_task_state.state_options import STATE_OPTIONS

    assert STATE_OPTIONS["backend"]["default"] == "airflow_task_state.metastore.MetastoreStateBackend"
    monkeypatch.setattr(conf, "get", lambda section, key, fallback=None, **kwargs: fallback)
    monkeypatch.setattr(config, "_read", {})  # options are read once per process: afresh here
    assert resolve_state_backend() is MetastoreStateBackend
    monkeypatch.setitem(STATE_OPTIONS["backend"], "default", f"{__name__}.CountingBackend")
    config._read.clear()
    assert resolve_state_backend() is CountingBackend


def test_environment_variable_chooses_the_class(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.CountingBackend")
    assert resolve_state_backend() is CountingBackend


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_setting_names_the_option(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", value)
    with pytest.raises(ValueError, match=r"\[state\] backend is empty"):
        resolve_state_backend()


@pytest.mark.parametrize("path", [f"{__name__}.NotABackend", "builtins.len", "airflow.models.xcom.XComModel"])
def test_wrong_class_is_refused(monkeypatch, path):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", path)
    with pytest.raises(TypeError, match="not a subclass of `BaseStateBackend`"):
        resolve_state_backend()


def test_unimportable_class_says_which(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "no_such_module.Backend")
    with pytest.raises(ImportError, match=r"\[state\] backend 'no_such_module.Backend' cannot be imported"):
        resolve_state_backend()


def test_instance_is_cached_and_built_once_across_threads(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.CountingBackend")
    CountingBackend.instances = 0
    barrier = threading.Barrier(16)
    seen: list[BaseStateBackend] = []

    def fetch() -> None:
        barrier.wait()
        seen.append(get_state_backend())

    threads = [threading.Thread(target=fetch) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert CountingBackend.instances == 1
    assert len({id(b) for b in seen}) == 1
