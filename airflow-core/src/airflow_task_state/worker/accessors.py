"""
``task_state`` and ``asset_state``: state as task code sees it.

Both are bound to the running task instance through ``get_current_context()``, so the same
objects work in classic operators, ``@task`` functions and async tasks. Values are any JSON
document except ``None``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import io
import json
import os
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, BinaryIO, Concatenate, ParamSpec, TypeVar

import httpx
from airflow.sdk import Asset, get_current_context
from airflow_shared.state import (
    COMMIT_KEY,
    StagedOp,
    validate_batch_size,
    validate_increment,
    validate_key,
    validate_many_keys,
    validate_write_options,
)

from airflow_task_state import codec, config
from airflow_task_state.exceptions import (
    StateAccessDeniedError,
    StateConflictError,
    StateUnavailableError,
    StateUnsupportedError,
)
from airflow_task_state.protocol import (
    ASSET_PREFIX,
    IF_VERSION_PARAMETER,
    INCREMENT,
    KEY_PARAMETER,
    KEYS,
    TASK_PREFIX,
    TTL_FIELD,
    VALUE,
    VALUES,
    VALUES_DELETE,
    VALUES_READ,
)
from airflow_task_state.worker import large, staging
from airflow_task_state.worker.client import StateClient
from airflow_task_state.worker.options import Versioned, ttl_field

_N = TypeVar("_N", bound="_StateNamespace")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _running_ti(what: str) -> Any:
    try:
        return get_current_context()["ti"]
    except (RuntimeError, KeyError):
        raise RuntimeError(
            f"{what} can only be used inside a running Airflow task: in an operator's execute(), a @task "
            "function, or code they call (including under `airflow dags test` / dag.test())."
        ) from None


#: How many times update() reads and tries to write before it gives up.
DEFAULT_UPDATE_ATTEMPTS = 20


def _backoff(attempt: int) -> float:
    """Seconds to wait after the *attempt*-th conflict: a few ms, growing, at random so writers spread."""
    return random.uniform(0, min(0.005 * 2**attempt, 0.25))


def _in_thread(method: Callable[Concatenate[_N, _P], _R]) -> Callable[Concatenate[_N, _P], Awaitable[_R]]:
    """
    The async twin of a sync method: it runs the sync one in a worker thread, so the event loop
    never waits on HTTP and the calls share the sync client's pooled connections.
    """

    @functools.wraps(method)  # inspect.signature() and help() show the sync method's parameters
    async def in_thread(self: _N, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    in_thread.__name__ = in_thread.__qualname__ = f"a{method.__name__}"
    in_thread.__doc__ = f":meth:`{method.__name__}` for async code."
    return in_thread


class _StateNamespace:
    """The methods shared by task state and one asset's state; subclasses say where the keys live."""

    _what = "state"

    def _scope(self, *, staging_write: bool = False) -> tuple[Any, staging.Target]:
        """The running task instance, and the asset ``(name, uri)`` this namespace is (None: task state)."""
        raise NotImplementedError

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        ti, asset = self._scope()
        client = StateClient(ti)
        if asset is None:
            path, params = TASK_PREFIX.format(task_instance_id=client.ti_id) + path, {}
        else:
            path, params = ASSET_PREFIX + path, {"name": asset[0], "uri": asset[1]}
        return client.request(method, path, params={**params, **kwargs.pop("params", {})}, **kwargs)

    def _one_key(self, method: str, key: str, path: str = VALUE, **kwargs: Any) -> httpx.Response:
        # Checked here too, so a bad key fails in the task with the full message and no round trip.
        validate_key(key)
        return self._request(method, path, params={KEY_PARAMETER: key, **kwargs.pop("params", {})}, **kwargs)

    def _read(self, key: str) -> dict[str, Any] | None:
        response = self._one_key("GET", key)
        if response.status_code == 404:
            return None
        answer = response.json()
        if answer["key"] != key:  # never expected; a value must not be returned for another key
            raise StateUnavailableError(f"task state API answered for key {answer['key']!r}, asked {key!r}")
        return answer

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under *key*, or *default*; a write this try staged shows over it."""
        staged = self._staged().get(key)
        answer = None
        if staged is None or staged.op is StagedOp.INCREMENT:  # a staged set or delete hides the stored
            answer = self._read(key)
        value = _ABSENT if answer is None else large.load(answer["value"], key, f"{self._what}.get")
        if staged is not None:
            value = self._overlay(key, staged, value, "get")
        return default if value is _ABSENT else value

    # --- writes that count only if the try succeeds -------------------------------------------

    def _staged(self) -> dict[str, staging.Staged]:
        if not staging.anything_staged():  # the usual case: no lookup of the task instance
            return {}
        return staging.staged_in(*self._scope())

    def _overlay(self, key: str, staged: staging.Staged, stored: Any, call: str) -> Any:
        """What a read in this try sees of *key*: *staged* over *stored* (both may be ``_ABSENT``)."""
        try:
            text = staged.read_over(key, None if stored is _ABSENT else json.dumps(stored))
        except ValueError as error:
            raise ValueError(
                f"{self._what}.{call}({key!r:.60}): {error}; the staged increment would be refused"
            ) from None
        return _ABSENT if text is None else codec.decode(text)

    def _stage(self, key: str, write: staging.Staged, call: str) -> None:
        validate_key(key)
        ti, asset = self._scope(staging_write=True)
        if asset is None and key == COMMIT_KEY:
            raise ValueError(f"{self._what}.{call}: key {COMMIT_KEY!r} is reserved; use another key")
        staging.stage(ti, asset, key, write, f"{self._what}.{call}({key!r:.60})")

    def stage(self, key: str, value: Any, *, ttl: Any = None) -> None:
        """
        Stage storing *value* under *key*: written with the try's other staged writes, in one atomic
        step, once the try has succeeded; never if it fails, is killed or cleared. Reads in this try
        see it at once. Checked now, as set() checks, so a bad key, value or ttl fails the try.
        """
        ttl_text = ttl_field(ttl)
        # A large value is kept as JSON here and uploaded only as the commit is sent (staging.commit).
        text = large.encode(value, f"{self._what}.stage", upload=False)
        self._stage(key, staging.Staged(StagedOp.SET, text, ttl=ttl_text), "stage")

    def stage_file(self, key: str, source: str | os.PathLike[str] | BinaryIO, *, ttl: Any = None) -> None:
        """
        Stage storing the bytes of *source* under *key*, as :meth:`set_file` stores them, applied
        with the try's other staged writes once it succeeds, or not at all. The bytes are uploaded
        now (the file may be gone by the commit) to an object no key names; only the commit stores
        its reference, so a try that fails leaves an object that ``airflow state clean`` collects.
        Reads in this try (``get_file``, ``get_bytes``) see the staged bytes.
        """
        ttl_text = ttl_field(ttl)
        validate_key(key)
        self._stage(key, staging.Staged(StagedOp.SET, large.store_file(source), ttl=ttl_text), "stage_file")

    def stage_bytes(self, key: str, data: bytes, *, ttl: Any = None) -> None:
        """Stage storing *data* under *key* as :meth:`stage_file` does a file's bytes."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(
                f"{self._what}.stage_bytes takes bytes, not {type(data).__name__}; for JSON use stage()"
            )
        self.stage_file(key, io.BytesIO(data), ttl=ttl)

    def stage_delete(self, key: str) -> None:
        """Stage removing *key* (see :meth:`stage`); reads in this try no longer see it."""
        self._stage(key, staging.Staged(StagedOp.DELETE), "stage_delete")

    def stage_increment(self, key: str, by: int = 1, *, ttl: Any = None) -> None:
        """
        Stage adding *by* to the integer under *key* (see :meth:`stage`), added to what is stored
        when the commit is applied, so concurrent runs adding to one counter all count.
        """
        validate_increment(by)
        self._stage(key, staging.Staged(StagedOp.INCREMENT, by=by, ttl=ttl_field(ttl)), "stage_increment")

    def get_versioned(self, key: str) -> Versioned | None:
        """
        The value stored under *key* with its version, or ``None``; pass the version to
        ``set(..., if_version=...)`` to write only if nobody wrote in between.

        :raises StateUnsupportedError: when the configured backend keeps no versions.
        """
        if key in self._staged():
            raise ValueError(
                f"{self._what}.get_versioned({key!r:.60}): the key has a write staged in this try, whose "
                "version is known only once the try succeeds; read it with get()"
            )
        answer = self._read(key)
        if answer is None:
            return None
        if answer.get("version") is None:
            raise StateUnsupportedError(
                f"{self._what}.get_versioned({key!r}): the configured state backend keeps no versions; "
                "use a backend that does (the metastore and Redis backends do)"
            )
        return Versioned(large.load(answer["value"], key, f"{self._what}.get_versioned"), answer["version"])

    def set(self, key: str, value: Any, *, ttl: Any = None, if_version: int | None = None) -> int | None:
        """
        Store *value* (any JSON document except None) under *key*; return the key's new version
        (``None`` from a backend without versions).

        :param ttl: how long the key lives after this write: a ``timedelta`` or seconds, or
            ``NEVER_EXPIRES``; ``None``: the default (task state: ``[state] default_task_retention``,
            30 days unless configured; asset state: never).
        :param if_version: write only if the key is still at this version (from
            :meth:`get_versioned`; 0: only if it is absent), else raise ``StateConflictError``.
        """
        ttl_text = ttl_field(ttl)
        validate_write_options(None, if_version)
        # The value is checked here too, so a bad one fails in the task, with no round trip.
        return self._put(key, large.encode(value, f"{self._what}.set"), ttl_text, if_version)

    def _put(self, key: str, text: str, ttl_text: float | str | None, if_version: int | None) -> int | None:
        body = _document('"value":' + text, ttl_text)
        params = {} if if_version is None else {IF_VERSION_PARAMETER: str(if_version)}
        # A conditional write must not be repeated blindly: applied twice, it conflicts with itself.
        response = self._one_key("PUT", key, content=body, params=params, idempotent=if_version is None)
        return response.json()["version"]

    # --- files and bytes, streamed through object storage -----------------------------------

    def set_file(
        self,
        key: str,
        source: str | os.PathLike[str] | BinaryIO,
        *,
        ttl: Any = None,
        if_version: int | None = None,
    ) -> int | None:
        """
        Store the bytes of *source* (a local file's path, or a binary file object open for reading)
        under *key*, streamed to ``[state] object_storage_path`` in chunks, never whole in memory;
        return the key's new version. ``ttl`` and ``if_version`` as for :meth:`set`. Read them
        back with :meth:`get_file` or :meth:`get_bytes`.
        """
        ttl_text = ttl_field(ttl)
        validate_key(key)
        validate_write_options(None, if_version)
        return self._put(key, large.store_file(source), ttl_text, if_version)

    def set_bytes(
        self, key: str, data: bytes, *, ttl: Any = None, if_version: int | None = None
    ) -> int | None:
        """Store *data* under *key* as :meth:`set_file` does a file's bytes."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(
                f"{self._what}.set_bytes takes bytes, not {type(data).__name__}; for JSON use set()"
            )
        return self.set_file(key, io.BytesIO(data), ttl=ttl, if_version=if_version)

    def _file_reference(self, key: str, call: str) -> Any:
        staged = self._staged().get(key)
        if staged is not None:  # what this try staged shows over what is stored, as get() shows it
            if staged.op is StagedOp.DELETE:
                return None
            if staged.op is StagedOp.INCREMENT:
                raise TypeError(f"{self._what}.{call}({key!r:.60}) has an increment staged: not a file")
            return large.file_reference(json.loads(staged.text or ""), key, f"{self._what}.{call}")
        answer = self._read(key)
        return None if answer is None else large.file_reference(answer["value"], key, f"{self._what}.{call}")

    def get_file(self, key: str, destination: str | os.PathLike[str] | BinaryIO) -> bool:
        """
        Stream the bytes stored under *key* (by :meth:`set_file` or :meth:`set_bytes`) into
        *destination*, a local path or a binary file object open for writing; ``False`` when the
        key holds nothing. Checked against the size and digest (BLAKE3) recorded when they were written:
        ``LargeValueCorruptedError`` if they differ. A path is written beside it and renamed only
        once checked; a file object may have received bytes before the error: discard them.
        """
        reference = self._file_reference(key, "get_file")
        if reference is None:
            return False
        large.read_file(reference, destination)
        return True

    def get_bytes(self, key: str) -> bytes | None:
        """The bytes stored under *key* (see :meth:`get_file`), whole in memory; ``None`` when absent."""
        reference = self._file_reference(key, "get_bytes")
        return None if reference is None else large.read_bytes(reference)

    def update(
        self,
        key: str,
        fn: Callable[[Any], Any],
        default: Any = None,
        *,
        ttl: Any = None,
        max_attempts: int = DEFAULT_UPDATE_ATTEMPTS,
    ) -> Any:
        """
        Read-modify-write *key* without losing a concurrent write: store ``fn(current)`` (current:
        the stored value, or *default* when there is none) only if nobody wrote the key in
        between, else read it again and call *fn* again; return the value stored.

        *fn* may run several times, so it must only compute (no side effects), and must not
        return None. Gives up with ``StateConflictError`` after *max_attempts* reads.
        """
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive int, got {max_attempts!r}")
        ttl_text = ttl_field(ttl)
        for attempt in range(max_attempts):
            current = self.get_versioned(key)
            new = fn(default if current is None else current.value)
            try:
                self.set(key, new, ttl=ttl_text, if_version=0 if current is None else current.version)
                return new
            except StateConflictError:
                if attempt + 1 == max_attempts:
                    raise
            time.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    async def aupdate(
        self,
        key: str,
        fn: Callable[[Any], Any],
        default: Any = None,
        *,
        ttl: Any = None,
        max_attempts: int = DEFAULT_UPDATE_ATTEMPTS,
    ) -> Any:
        """:meth:`update` for async code; *fn* may be a plain function or a coroutine function."""
        loop = asyncio.get_running_loop()

        def computed(current: Any) -> Any:  # called in update()'s thread; a coroutine runs on this loop
            new = fn(current)
            return asyncio.run_coroutine_threadsafe(new, loop).result() if inspect.iscoroutine(new) else new

        return await asyncio.to_thread(
            self.update, key, computed, default, ttl=ttl, max_attempts=max_attempts
        )

    def increment(self, key: str, by: int = 1, *, ttl: Any = None) -> int:
        """
        Add *by* (may be negative) to the integer stored under *key* (absent: 0) in one atomic
        step, and return the result; concurrent increments never lose one another.

        :raises InvalidStateError: when the key holds anything but an integer (nothing is written).
        """
        validate_increment(by)
        body = _document(f'"by":{by}', ttl_field(ttl))
        return self._one_key("POST", key, INCREMENT, content=body, idempotent=False).json()["value"]

    def delete(self, key: str) -> None:
        """Remove *key*; removing a key that is not there is not an error."""
        self._one_key("DELETE", key)

    # --- many keys, one request ------------------------------------------------------------

    def _many(self, method: str, path: str, body: str) -> httpx.Response:
        encoded, limit = body.encode(), config.max_batch_bytes()
        if len(encoded) > limit:
            raise ValueError(
                f"{self._what} batch is {len(encoded)} bytes as JSON; the limit is {limit} "
                "([state] max_batch_bytes): split it into smaller batches"
            )
        return self._request(method, path, content=encoded)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """
        The values of those of *keys* that are stored (the others are left out), in one request.
        Up to 1000 keys per call.
        """
        wanted = validate_many_keys(keys, f"{self._what}.get_many")
        staged = self._staged()
        # Keys staged to be set or deleted need no read; an increment adds to what is stored.
        asked = [key for key in wanted if key not in staged or staged[key].op is StagedOp.INCREMENT]
        found = {}
        if asked:
            found = self._many("POST", VALUES_READ, json.dumps({"keys": asked})).json()["values"]
            if not set(found) <= set(asked):  # never expected; values must not come back for other keys
                raise StateUnavailableError(
                    f"task state API answered for keys that were not asked: {sorted(found)!r:.200}"
                )
            found = {key: large.load(value, key, f"{self._what}.get_many") for key, value in found.items()}
        for key in staged.keys() & set(wanted):
            found[key] = self._overlay(key, staged[key], found.get(key, _ABSENT), "get_many")
        return {key: value for key, value in found.items() if value is not _ABSENT}

    def set_many(self, values: Mapping[str, Any], *, ttl: Any = None) -> dict[str, int | None]:
        """
        Store every key-value pair of *values* (values: any JSON document except None) in one
        request, and return each key's new version. The metastore and Redis backends write the
        batch atomically: all keys or none, never seen half written. Up to 1000 keys per call.

        :param ttl: as for :meth:`set`, the same for every key.
        """
        if not isinstance(values, Mapping):
            raise TypeError(
                f"{self._what}.set_many takes a mapping of keys to values, got {type(values).__name__}"
            )
        validate_batch_size(len(values), f"{self._what}.set_many")
        if not values:
            return {}
        ttl_text = ttl_field(ttl)
        # Checked here too, so a bad key or value fails in the task, naming it, with no round trip.
        pairs = []
        for key, value in values.items():
            validate_key(key)
            try:
                text = large.encode(value, f"{self._what}.set_many")
                pairs.append(json.dumps(key, ensure_ascii=False) + ":" + text)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{self._what}.set_many: the value of key {key!r:.60}: {error}") from None
        body = _document('"values":{' + ",".join(pairs) + "}", ttl_text)
        return self._many("PUT", VALUES, body).json()["versions"]

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove each of *keys* in one request; keys that are not there are not an error."""
        doomed = validate_many_keys(keys, f"{self._what}.delete_many")
        if doomed:
            self._many("POST", VALUES_DELETE, json.dumps({"keys": doomed}))

    def clear(self) -> None:
        """Remove every key of this namespace."""
        self._request("DELETE", KEYS)

    def keys(self) -> list[str]:
        """The keys stored in this namespace, sorted, with the writes this try staged applied."""
        stored = self._request("GET", KEYS).json()["keys"]
        staged = self._staged()
        if not staged:
            return stored
        deleted = {key for key, write in staged.items() if write.op is StagedOp.DELETE}
        return sorted((set(stored) | set(staged)) - deleted)

    aget = _in_thread(get)
    aget_versioned = _in_thread(get_versioned)
    aset = _in_thread(set)
    aincrement = _in_thread(increment)
    adelete = _in_thread(delete)
    aget_many = _in_thread(get_many)
    aset_many = _in_thread(set_many)
    adelete_many = _in_thread(delete_many)
    aclear = _in_thread(clear)
    # Streams run in a worker thread too: the event loop never waits on object storage.
    aset_file = _in_thread(set_file)
    aset_bytes = _in_thread(set_bytes)
    aget_file = _in_thread(get_file)
    aget_bytes = _in_thread(get_bytes)
    akeys = _in_thread(keys)
    # Staging is in memory, but the first staged write of a try obtains its credential.
    astage = _in_thread(stage)
    astage_delete = _in_thread(stage_delete)
    astage_increment = _in_thread(stage_increment)
    astage_file = _in_thread(stage_file)
    astage_bytes = _in_thread(stage_bytes)


_ABSENT: Any = object()  # a key with no value, where None could be mistaken for one


def _document(fields: str, ttl: float | str | None) -> str:
    """A request body of JSON *fields* (text already encoded), with the ttl when one is given."""
    if ttl is not None:
        fields += f',"{TTL_FIELD}":' + json.dumps(ttl)
    return "{" + fields + "}"


class TaskState(_StateNamespace):
    """The running task instance's state: shared by its tries, separate per map index."""

    _what = "task_state"

    def _scope(self, *, staging_write: bool = False) -> tuple[Any, staging.Target]:
        return _running_ti(self._what), None

    def __repr__(self) -> str:
        return "<task_state: the running task instance's state>"


class AssetState(_StateNamespace):
    """One asset's state, for an asset the running task declares as an inlet or outlet."""

    _what = "asset_state"

    def __init__(self, asset: Any) -> None:
        self._asset = asset

    def _scope(self, *, staging_write: bool = False) -> tuple[Any, staging.Target]:
        ti = _running_ti(self._what)
        name, uri = _declared_asset(ti, self._asset)
        if staging_write and not any(
            isinstance(asset, Asset) and (asset.name, asset.uri) == (name, uri) for asset in ti.task.outlets
        ):
            raise StateAccessDeniedError(
                f"asset_state[{self._asset!r}]: task {ti.task_id!r} declares this asset as an inlet only: "
                "staging writes to it needs the asset in the task's outlets"
            )
        return ti, (name, uri)

    def __repr__(self) -> str:
        return f"<asset_state[{self._asset!r}]>"


def _declared_asset(ti: Any, wanted: Any) -> tuple[str, str]:
    """Match *wanted* (an Asset, or a name or URI) against the task's inlets and outlets."""
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
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a password in the URI, which Airflow drops
            return Asset(uri=text).uri
    except (TypeError, ValueError):
        return None


class AssetStates:
    """``asset_state[asset]``: by ``Asset`` object, name or URI."""

    def __getitem__(self, asset: Any) -> AssetState:
        if not isinstance(asset, (Asset, str)) or (isinstance(asset, str) and not asset):
            raise TypeError(f"asset_state[...] takes an Asset, or an asset's name or URI; got {asset!r}")
        return AssetState(asset)

    def __repr__(self) -> str:
        return "<asset_state: state of the assets the running task declares>"


task_state = TaskState()
asset_state = AssetStates()
