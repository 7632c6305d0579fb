"""The Redis state backend: task and asset state in Redis hashes (layout in :mod:`._keys`)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.client
import redis.client
from airflow_shared.state import (
    AssetScope,
    BaseStateBackend,
    StateEntry,
    StateEntryPage,
    StateScope,
    TaskScope,
    validate_key,
    validate_listing,
    validate_scope,
    validate_value,
)
from airflow_shared.state.entries import page_of_keys
from redis.commands.core import AsyncScript, Script

from ._config import UNSET, RedisSettings, Unset, invalid_url, resolve_settings
from ._errors import mask_url, reachable
from ._keys import META_SUFFIX, KeyLayout, require_dag_run_uid
from ._loops import PerLoop
from ._scripts import CLEAR_ALL_MAP_INDEXES, DELETE_TASK_KEY

# Bounded so an unreachable host fails in seconds instead of hanging a task; a
# `?socket_connect_timeout=` in the URL takes precedence (redis-py lets URL options win).
_CLIENT_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 5.0}

_Pipeline = redis.client.Pipeline | redis.asyncio.client.Pipeline

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A metadata value: "<epoch microseconds>:<try number, or nothing>" (layout in ._keys). Anything
# else (hand-edited, or from a future build) reads as "not known" rather than failing a listing.
_META = re.compile(rb"(\d{1,20}):(-?\d{1,20})?")


def _utf8(text: str, what: str) -> bytes:
    # Encoding here, not in redis-py, makes an unencodable string (a lone surrogate) fail before
    # any I/O, and keeps the bytes stored exactly the UTF-8 of what the caller gave.
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"state {what} cannot be stored as UTF-8: {error}") from None


def _validate_scope(scope: object) -> None:
    validate_scope(scope)
    # Redis is not told when a dag run is deleted: without the run's incarnation in the key, a run
    # re-created with the same run_id would read the deleted run's state.
    if isinstance(scope, TaskScope):
        require_dag_run_uid(scope)


def _field_text(raw: bytes | str) -> str:
    # The clients are built without decode_responses, so replies are bytes; str is only typing.
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def _text(raw: bytes | str | None) -> str | None:
    return None if raw is None else _field_text(raw)


def _validate_try_number(try_number: object) -> None:
    if try_number is not None and (not isinstance(try_number, int) or isinstance(try_number, bool)):
        raise TypeError(f"try_number must be an int or None, got {type(try_number).__name__}: {try_number!r}")


def _meta_text(scope: StateScope, try_number: int | None) -> bytes:
    """What the metadata hash records for a write made now by *try_number*."""
    # Asset state belongs to no task instance, so no try is recorded for it.
    writer = "" if try_number is None or not isinstance(scope, TaskScope) else str(try_number)
    return f"{time.time_ns() // 1000}:{writer}".encode()


def _parse_meta(raw: bytes | str | None, scope: StateScope) -> tuple[datetime | None, int | None]:
    """``(updated_at, updated_by_try)`` from a metadata value; both ``None`` when absent or garbled."""
    if raw is None:  # written by a build that predates the metadata, or the field was lost
        return None, None
    match = _META.fullmatch(raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace"))
    if match is None:
        return None, None
    try:
        updated_at = _EPOCH + timedelta(microseconds=int(match[1]))
    except OverflowError:  # past datetime.max
        return None, None
    writer = match[2]
    return updated_at, int(writer) if writer is not None and isinstance(scope, TaskScope) else None


@dataclass(frozen=True)
class _AsyncConnection:
    client: redis.asyncio.Redis
    delete_task_key: AsyncScript
    clear_all: AsyncScript


async def _close_async(connection: _AsyncConnection) -> None:
    await connection.client.aclose()


class RedisStateBackend(BaseStateBackend):
    """
    Keeps task and asset state in Redis.

    Task state lives in one hash per task instance of one incarnation of its dag run
    (``TaskScope.dag_run_uid``, required: a task scope without it raises ``ValueError``), so a run
    deleted and created again with the same run_id starts empty. Redis is not told when a run is
    deleted, so those hashes carry a time to live refreshed on every write (``task_ttl_seconds``,
    default 30 days).
    Asset state lives in one hash per asset and does not expire unless ``asset_ttl_seconds`` is set.
    Beside each hash a metadata hash records when, and by which try (:meth:`set_by_try`), each key
    was last written; :meth:`entries` reports it.

    Settings not passed are read from ``[state_redis]`` in Airflow's configuration (when Airflow
    is importable) and then from ``AIRFLOW__STATE_REDIS__*`` environment variables.

    :param url: a redis-py URL (``redis://``, ``rediss://`` or ``unix://``).
    :param key_prefix: the first component of every key; default ``airflow:state``.
    :param task_ttl_seconds: expiry of task state after its last write; ``None`` or 0: never.
    :param asset_ttl_seconds: expiry of asset state after its last write; ``None`` or 0: never.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        key_prefix: str | None = None,
        task_ttl_seconds: int | Unset | None = UNSET,
        asset_ttl_seconds: int | Unset | None = UNSET,
    ) -> None:
        self._settings: RedisSettings = resolve_settings(url, key_prefix, task_ttl_seconds, asset_ttl_seconds)
        self._keys = KeyLayout(self._settings.key_prefix)
        # redis-py connects lazily: building the backend does no I/O, so resolving the backend
        # class (e.g. in `airflow config` or at import) never waits on the network.
        try:
            self._client: redis.Redis = redis.Redis.from_url(self._settings.url, **_CLIENT_OPTIONS)
        except ValueError as error:  # what _check_url does not look at, e.g. "?socket_timeout=abc"
            raise invalid_url(self._settings.url, self._settings.url_source, error) from None
        self._delete_task_key: Script = self._client.register_script(DELETE_TASK_KEY)
        self._clear_all: Script = self._client.register_script(CLEAR_ALL_MAP_INDEXES)
        self._async: PerLoop[_AsyncConnection] = PerLoop(self._connect_async, _close_async)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(url={mask_url(self._settings.url)!r}, "
            f"key_prefix={self._settings.key_prefix!r})"
        )

    # --- sync --------------------------------------------------------------------------

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        name, field = self._read_target(scope, key)
        with self._reachable():
            raw = self._client.hget(name, field)
        return _text(raw)

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        self.set_by_try(scope, key, value, try_number=None, session=session)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        field, data, meta = self._checked_write(scope, key, value, try_number)
        with self._reachable(), self._client.pipeline(transaction=True) as pipe:
            self._queue_set(pipe, scope, field, data, meta)
            pipe.execute()

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        _, field = self._read_target(scope, key)
        with self._reachable():
            if isinstance(scope, TaskScope):
                self._delete_task_key(keys=self._delete_keys(scope), args=[field, scope.map_index])
            else:
                with self._client.pipeline(transaction=True) as pipe:
                    self._queue_asset_delete(pipe, scope, field)
                    pipe.execute()

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _validate_scope(scope)
        with self._reachable():
            if isinstance(scope, TaskScope) and all_map_indices:
                self._clear_all(keys=[self._keys.task_index(scope)], args=self._clear_all_args(scope))
                return
            with self._client.pipeline(transaction=True) as pipe:
                self._queue_clear(pipe, scope)
                pipe.execute()

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        _validate_scope(scope)
        with self._reachable():
            fields = self._client.hkeys(self._hash(scope))
        return sorted(_field_text(field) for field in fields)

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> StateEntryPage:
        _validate_scope(scope)
        validate_listing(key_prefix, offset, limit)
        name, meta_name = self._hash(scope), self._meta(scope)
        with self._reachable():
            fields = self._client.hkeys(name)
        # Sorted and filtered here, not with HSCAN MATCH: a prefix is text, never a glob pattern,
        # and every backend pages in Python's code-point order.
        keys, total = page_of_keys([_field_text(field) for field in fields], key_prefix, offset, limit)
        if not keys:  # HMGET needs at least one field
            return StateEntryPage([], total)
        wanted = [key.encode("utf-8") for key in keys]
        # One MULTI/EXEC, so each value is read with the metadata of the same write.
        with self._reachable(), self._client.pipeline(transaction=True) as pipe:
            pipe.hmget(name, wanted)
            pipe.hmget(meta_name, wanted)
            values, metas = pipe.execute()
        found = []
        for key, raw, raw_meta in zip(keys, values, metas, strict=True):
            if raw is None:  # deleted between listing the keys and reading them
                continue
            updated_at, updated_by_try = _parse_meta(raw_meta, scope)
            found.append(StateEntry(key, _field_text(raw), updated_at, updated_by_try))
        return StateEntryPage(found, total)

    def key_counts(self, scopes: Sequence[StateScope], *, session: Any = None) -> list[int]:
        scopes = list(scopes)
        for scope in scopes:
            _validate_scope(scope)
        if not scopes:
            return []
        # Counts only, no writes: a plain pipeline (one round trip) needs no MULTI.
        with self._reachable(), self._client.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.hlen(self._hash(scope))
            counts = pipe.execute()
        return [int(count) for count in counts]

    # --- async (redis.asyncio, no threads) -----------------------------------------------

    async def aget(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        name, field = self._read_target(scope, key)
        with self._reachable():
            connection = await self._async.get()
            raw = await connection.client.hget(name, field)
        return _text(raw)

    async def aset(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        await self.aset_by_try(scope, key, value, try_number=None, session=session)

    async def aset_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        field, data, meta = self._checked_write(scope, key, value, try_number)
        with self._reachable():
            connection = await self._async.get()
            async with connection.client.pipeline(transaction=True) as pipe:
                self._queue_set(pipe, scope, field, data, meta)
                await pipe.execute()

    async def adelete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        _, field = self._read_target(scope, key)
        with self._reachable():
            connection = await self._async.get()
            if isinstance(scope, TaskScope):
                await connection.delete_task_key(keys=self._delete_keys(scope), args=[field, scope.map_index])
            else:
                async with connection.client.pipeline(transaction=True) as pipe:
                    self._queue_asset_delete(pipe, scope, field)
                    await pipe.execute()

    async def aclear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _validate_scope(scope)
        with self._reachable():
            connection = await self._async.get()
            if isinstance(scope, TaskScope) and all_map_indices:
                await connection.clear_all(
                    keys=[self._keys.task_index(scope)], args=self._clear_all_args(scope)
                )
                return
            async with connection.client.pipeline(transaction=True) as pipe:
                self._queue_clear(pipe, scope)
                await pipe.execute()

    async def akeys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        _validate_scope(scope)
        with self._reachable():
            connection = await self._async.get()
            fields = await connection.client.hkeys(self._hash(scope))
        return sorted(_field_text(field) for field in fields)

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync connection pool; async clients close with their event loop."""
        self._client.close()
        self._async.forget_all()

    async def aclose(self) -> None:
        """Close the running loop's async client and the sync connection pool."""
        await self._async.close_current()
        self._client.close()

    # --- plumbing ------------------------------------------------------------------------

    def _reachable(self) -> AbstractContextManager[None]:
        return reachable(self._settings.url, self._settings.url_source)

    def _connect_async(self) -> _AsyncConnection:
        client = redis.asyncio.Redis.from_url(self._settings.url, **_CLIENT_OPTIONS)
        return _AsyncConnection(
            client=client,
            delete_task_key=client.register_script(DELETE_TASK_KEY),
            clear_all=client.register_script(CLEAR_ALL_MAP_INDEXES),
        )

    def _hash(self, scope: StateScope) -> str:
        return self._keys.task_hash(scope) if isinstance(scope, TaskScope) else self._keys.asset_hash(scope)

    def _meta(self, scope: StateScope) -> str:
        """The metadata hash beside :meth:`_hash`: when and by which try each key was written."""
        return self._keys.task_meta(scope) if isinstance(scope, TaskScope) else self._keys.asset_meta(scope)

    def _delete_keys(self, scope: TaskScope) -> list[str]:
        """KEYS of the ``DELETE_TASK_KEY`` script."""
        return [self._keys.task_hash(scope), self._keys.task_index(scope), self._keys.task_meta(scope)]

    def _clear_all_args(self, scope: TaskScope) -> list[str]:
        """ARGV of the ``CLEAR_ALL_MAP_INDEXES`` script."""
        return [self._keys.task_base(scope) + ":", META_SUFFIX]

    def _read_target(self, scope: StateScope, key: str) -> tuple[str, bytes]:
        """Validate a keyed call and return the hash name and field it addresses."""
        _validate_scope(scope)
        validate_key(key)
        return self._hash(scope), _utf8(key, "key")

    def _checked_write(
        self, scope: StateScope, key: str, value: str, try_number: int | None
    ) -> tuple[bytes, bytes, bytes]:
        """Validate a write; return its field, value and metadata text, all encoded."""
        _validate_scope(scope)
        validate_key(key)
        validate_value(value)
        _validate_try_number(try_number)
        return _utf8(key, "key"), _utf8(value, "value"), _meta_text(scope, try_number)

    def _queue_set(self, pipe: _Pipeline, scope: StateScope, field: bytes, data: bytes, meta: bytes) -> None:
        # Queued on a MULTI/EXEC pipeline: the value, its metadata, the map-index entry and the
        # expiry land together or not at all.
        if isinstance(scope, TaskScope):
            name, meta_name = self._keys.task_hash(scope), self._keys.task_meta(scope)
            index = self._keys.task_index(scope)
            pipe.hset(name, field, data)
            pipe.hset(meta_name, field, meta)
            pipe.sadd(index, scope.map_index)
            # The index set is refreshed with every hash of the task, so it always outlives them
            # and clearing all map indexes never misses one.
            self._queue_expiry(pipe, (name, meta_name, index), self._settings.task_ttl_seconds)
        else:
            name, meta_name = self._keys.asset_hash(scope), self._keys.asset_meta(scope)
            pipe.hset(name, field, data)
            pipe.hset(meta_name, field, meta)
            self._queue_expiry(pipe, (name, meta_name), self._settings.asset_ttl_seconds)

    def _queue_asset_delete(self, pipe: _Pipeline, scope: AssetScope, field: bytes) -> None:
        pipe.hdel(self._keys.asset_hash(scope), field)
        pipe.hdel(self._keys.asset_meta(scope), field)

    @staticmethod
    def _queue_expiry(pipe: _Pipeline, names: tuple[str, ...], ttl: int | None) -> None:
        for name in names:
            if ttl:
                pipe.expire(name, ttl)
            else:
                # Without a TTL a write makes the key permanent, so switching expiry off applies
                # to keys written before the switch as soon as they are written again.
                pipe.persist(name)

    def _queue_clear(self, pipe: _Pipeline, scope: AssetScope | TaskScope) -> None:
        if isinstance(scope, TaskScope):
            pipe.delete(self._keys.task_hash(scope), self._keys.task_meta(scope))
            pipe.srem(self._keys.task_index(scope), scope.map_index)
        else:
            pipe.delete(self._keys.asset_hash(scope), self._keys.asset_meta(scope))
