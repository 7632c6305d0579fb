"""The Redis state backend: task and asset state in Redis hashes (layout in :mod:`._keys`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.client
import redis.client
from airflow_shared.state import (
    AssetScope,
    BaseStateBackend,
    StateScope,
    TaskScope,
    validate_key,
    validate_scope,
    validate_value,
)
from redis.commands.core import AsyncScript, Script

from ._config import UNSET, RedisSettings, Unset, invalid_url, resolve_settings
from ._errors import mask_url, reachable
from ._keys import KeyLayout, require_dag_run_uid
from ._loops import PerLoop
from ._scripts import CLEAR_ALL_MAP_INDEXES, DELETE_TASK_KEY

# Bounded so an unreachable host fails in seconds instead of hanging a task; a
# `?socket_connect_timeout=` in the URL takes precedence (redis-py lets URL options win).
_CLIENT_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 5.0}

_Pipeline = redis.client.Pipeline | redis.asyncio.client.Pipeline


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
        field, data = self._checked_write(scope, key, value)
        with self._reachable(), self._client.pipeline(transaction=True) as pipe:
            self._queue_set(pipe, scope, field, data)
            pipe.execute()

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        name, field = self._read_target(scope, key)
        with self._reachable():
            if isinstance(scope, TaskScope):
                self._delete_task_key(
                    keys=[name, self._keys.task_index(scope)], args=[field, scope.map_index]
                )
            else:
                self._client.hdel(name, field)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _validate_scope(scope)
        with self._reachable():
            if isinstance(scope, TaskScope) and all_map_indices:
                self._clear_all(keys=[self._keys.task_index(scope)], args=[self._keys.task_base(scope) + ":"])
                return
            with self._client.pipeline(transaction=True) as pipe:
                self._queue_clear(pipe, scope)
                pipe.execute()

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        _validate_scope(scope)
        with self._reachable():
            fields = self._client.hkeys(self._hash(scope))
        return sorted(_field_text(field) for field in fields)

    # --- async (redis.asyncio, no threads) -----------------------------------------------

    async def aget(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        name, field = self._read_target(scope, key)
        with self._reachable():
            connection = await self._async.get()
            raw = await connection.client.hget(name, field)
        return _text(raw)

    async def aset(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        field, data = self._checked_write(scope, key, value)
        with self._reachable():
            connection = await self._async.get()
            async with connection.client.pipeline(transaction=True) as pipe:
                self._queue_set(pipe, scope, field, data)
                await pipe.execute()

    async def adelete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        name, field = self._read_target(scope, key)
        with self._reachable():
            connection = await self._async.get()
            if isinstance(scope, TaskScope):
                await connection.delete_task_key(
                    keys=[name, self._keys.task_index(scope)], args=[field, scope.map_index]
                )
            else:
                await connection.client.hdel(name, field)

    async def aclear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        _validate_scope(scope)
        with self._reachable():
            connection = await self._async.get()
            if isinstance(scope, TaskScope) and all_map_indices:
                await connection.clear_all(
                    keys=[self._keys.task_index(scope)], args=[self._keys.task_base(scope) + ":"]
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

    def _read_target(self, scope: StateScope, key: str) -> tuple[str, bytes]:
        """Validate a keyed call and return the hash name and field it addresses."""
        _validate_scope(scope)
        validate_key(key)
        return self._hash(scope), _utf8(key, "key")

    def _checked_write(self, scope: StateScope, key: str, value: str) -> tuple[bytes, bytes]:
        _validate_scope(scope)
        validate_key(key)
        validate_value(value)
        return _utf8(key, "key"), _utf8(value, "value")

    def _queue_set(self, pipe: _Pipeline, scope: StateScope, field: bytes, data: bytes) -> None:
        # Queued on a MULTI/EXEC pipeline: the value, the map-index entry and the expiry land
        # together or not at all.
        if isinstance(scope, TaskScope):
            name, index = self._keys.task_hash(scope), self._keys.task_index(scope)
            pipe.hset(name, field, data)
            pipe.sadd(index, scope.map_index)
            # The index set is refreshed with every hash of the task, so it always outlives them
            # and clearing all map indexes never misses one.
            self._queue_expiry(pipe, (name, index), self._settings.task_ttl_seconds)
        else:
            name = self._keys.asset_hash(scope)
            pipe.hset(name, field, data)
            self._queue_expiry(pipe, (name,), self._settings.asset_ttl_seconds)

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
            pipe.delete(self._keys.task_hash(scope))
            pipe.srem(self._keys.task_index(scope), scope.map_index)
        else:
            pipe.delete(self._keys.asset_hash(scope))
