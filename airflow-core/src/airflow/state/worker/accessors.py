"""
``task_state`` and ``asset_state``: state as task code sees it.

Both are bound to the running task instance through ``get_current_context()``, so the same
objects work in classic operators, ``@task`` functions and async tasks. Values are any JSON
document except ``None``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import httpx
from airflow.state import codec
from airflow.state.exceptions import StateAccessDeniedError, StateUnavailableError
from airflow.state.protocol import (
    ASSET_KEYS_PATH,
    ASSET_VALUE_PATH,
    KEY_PARAMETER,
    task_keys_path,
    task_value_path,
)
from airflow.state.worker.client import StateClient
from airflow_shared.state import validate_key

_OUTSIDE_TASK = (
    "{what} can only be used inside a running Airflow task: in an operator's execute(), a @task "
    "function, or code they call (including under `airflow dags test` / dag.test())."
)


def _running_task_instance(what: str) -> Any:
    from airflow.sdk import get_current_context

    try:
        return get_current_context()["ti"]
    except (RuntimeError, KeyError):
        raise RuntimeError(_OUTSIDE_TASK.format(what=what)) from None


def _client(what: str) -> tuple[StateClient, Any]:
    ti = _running_task_instance(what)
    return StateClient(ti), ti


class _StateNamespace:
    """The methods shared by task state and one asset's state; subclasses say where the keys live."""

    _what = "state"

    def _target(self) -> tuple[StateClient, dict[str, str], str, str]:
        """The client, the query parameters that name the namespace, and its keys and value paths."""
        raise NotImplementedError

    def _one_key(self, method: str, key: str, **kwargs: Any) -> httpx.Response:
        # Checked here too, so a bad key fails in the task with the full message and no round trip.
        validate_key(key)
        client, params, _, value_path = self._target()
        return client.request(method, value_path, params={**params, KEY_PARAMETER: key}, **kwargs)

    def _all_keys(self, method: str) -> httpx.Response:
        client, params, keys_path, _ = self._target()
        return client.request(method, keys_path, params=params)

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under *key*, or *default*."""
        response = self._one_key("GET", key)
        if response.status_code == 404:
            return default
        answer = response.json()
        if answer["key"] != key:  # never expected; a value must not be returned for another key
            raise StateUnavailableError(f"task state API answered for key {answer['key']!r}, asked {key!r}")
        return answer["value"]

    def set(self, key: str, value: Any) -> None:
        """Store *value* (any JSON document except None) under *key*."""
        self._one_key("PUT", key, content=_body(value))

    def delete(self, key: str) -> None:
        """Remove *key*; removing a key that is not there is not an error."""
        self._one_key("DELETE", key)

    def clear(self) -> None:
        """Remove every key of this namespace."""
        self._all_keys("DELETE")

    def keys(self) -> list[str]:
        """The keys stored in this namespace, sorted."""
        return self._all_keys("GET").json()["keys"]

    # The async methods run the sync ones in a worker thread: the event loop never waits on HTTP,
    # and the calls share the sync client's pooled connections.

    async def aget(self, key: str, default: Any = None) -> Any:
        return await asyncio.to_thread(self.get, key, default)

    async def aset(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self.set, key, value)

    async def adelete(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def akeys(self) -> list[str]:
        return await asyncio.to_thread(self.keys)


def _body(value: Any) -> str:
    # Checked here too, so a bad value fails in the task with the full message and no round trip.
    return '{"value":' + codec.encode(value) + "}"


class TaskState(_StateNamespace):
    """The running task instance's state: shared by its tries, separate per map index."""

    _what = "task_state"

    def _target(self) -> tuple[StateClient, dict[str, str], str, str]:
        client, _ = _client(self._what)
        return client, {}, task_keys_path(client.ti_id), task_value_path(client.ti_id)

    def __repr__(self) -> str:
        return "<task_state: the running task instance's state>"


class AssetState(_StateNamespace):
    """One asset's state, for an asset the running task declares as an inlet or outlet."""

    _what = "asset_state"

    def __init__(self, asset: Any) -> None:
        self._asset = asset

    def _target(self) -> tuple[StateClient, dict[str, str], str, str]:
        client, ti = _client(self._what)
        name, uri = _declared_asset(ti, self._asset)
        return client, {"name": name, "uri": uri}, ASSET_KEYS_PATH, ASSET_VALUE_PATH

    def __repr__(self) -> str:
        return f"<asset_state[{self._asset!r}]>"


def _declared_asset(ti: Any, wanted: Any) -> tuple[str, str]:
    """Match *wanted* (an Asset, or a name or URI) against the task's inlets and outlets."""
    from airflow.sdk import Asset

    declared = [a for a in [*ti.task.inlets, *ti.task.outlets] if isinstance(a, Asset)]
    for asset in declared:
        if isinstance(wanted, Asset):
            if (asset.name, asset.uri) == (wanted.name, wanted.uri):
                return asset.name, asset.uri
        elif wanted in (asset.name, asset.uri) or _normalized_uri(wanted) == asset.uri:
            return asset.name, asset.uri
    names = ", ".join(repr(a.name) for a in declared) or "none"
    raise StateAccessDeniedError(
        f"asset_state[{wanted!r}]: task {ti.task_id!r} does not declare this asset as an inlet or outlet "
        f"(declared: {names}); add it to the task's inlets= or outlets="
    )


def _normalized_uri(text: str) -> str | None:
    """*text* as Airflow stores an asset URI (``probe://private`` -> ``probe://private/``)."""
    from airflow.sdk import Asset

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a password in the URI, which Airflow drops
            return Asset(uri=text).uri
    except (TypeError, ValueError):
        return None


class AssetStates:
    """``asset_state[asset]``: by ``Asset`` object, name or URI."""

    def __getitem__(self, asset: Any) -> AssetState:
        from airflow.sdk import Asset

        if not isinstance(asset, (Asset, str)) or (isinstance(asset, str) and not asset):
            raise TypeError(f"asset_state[...] takes an Asset, or an asset's name or URI; got {asset!r}")
        return AssetState(asset)

    def __repr__(self) -> str:
        return "<asset_state: state of the assets the running task declares>"


task_state = TaskState()
asset_state = AssetStates()
