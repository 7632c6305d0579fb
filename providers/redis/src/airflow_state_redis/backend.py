"""The Redis state backend: task and asset state in Redis hashes (layout in :mod:`._keys`)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeAlias, TypeVar

import redis
import redis.asyncio
import redis.asyncio.client
import redis.asyncio.cluster
import redis.client
import redis.cluster
import redis.connection
from airflow_shared.state import (
    COMMIT_RECORD_SECONDS,
    BaseStateBackend,
    StagedCommit,
    StagedOp,
    StateCapabilityError,
    StateConflictError,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    VersionedValue,
    commit_record,
    incremented,
    validate_cleanup,
    validate_discard,
    validate_increment,
    validate_key,
    validate_listing,
    validate_scope,
    validate_value,
    validate_write,
)
from airflow_shared.state.entries import page_of_keys
from airflow_shared.state.many import validate_many_keys, validate_many_values
from redis.commands.core import AsyncScript, Script

from ._clients import build_client
from ._config import UNSET, RedisSettings, Topology, Unset, invalid_url, resolve_settings
from ._durable import CLUSTER_RETRIED, check_replicated, write_and_wait
from ._errors import mask_url, reachable
from ._held import ConnectionLost, HeldConnection, held_connection
from ._keys import META_SUFFIX, KeyLayout, require_dag_run_uid
from ._loops import PerLoop
from ._meta import meta_parts, micros, parse_meta, version_and_expiry
from ._scripts import READ_ONLY, SCRIPTS

_SyncClient = redis.Redis | redis.cluster.RedisCluster
_AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Script:
    """One call of the Lua script *name* of :mod:`._scripts`."""

    name: str
    keys: list[str]
    args: list[Any]


@dataclass(frozen=True)
class _Multi:
    """Read commands in one MULTI/EXEC: each a pipeline method's name and its arguments."""

    commands: tuple[tuple[Any, ...], ...]


#: An operation written once for both clients: a generator that validates its input (before any
#: I/O), yields each request, receives its reply, and returns the result (run by ``_run``/``_arun``).
_Op: TypeAlias = Generator[_Script | _Multi, Any, T]


def _sync(op: Callable[Concatenate[Any, P], _Op[T]]) -> Callable[Concatenate[Any, P], T]:
    """The contract method that runs operation *op* with the sync client."""

    @functools.wraps(op)
    def method(self: RedisStateBackend, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(op(self, *args, **kwargs))

    return _named(method, op.__name__.removeprefix("_op_"))


def _async(
    op: Callable[Concatenate[Any, P], _Op[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The async contract method that runs operation *op* with this event loop's asyncio client."""

    @functools.wraps(op)
    async def method(self: RedisStateBackend, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._arun(op(self, *args, **kwargs))

    return _named(method, "a" + op.__name__.removeprefix("_op_"))


def _named(method: F, name: str) -> F:
    method.__name__, method.__qualname__ = name, f"RedisStateBackend.{name}"
    return method


def _now_micros() -> int:
    # The expiry clock is the caller's, as for the metastore: expires_at comes from this clock too.
    return time.time_ns() // 1000


def _utf8(text: str, what: str = "key") -> bytes:
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


def _visible(raw: bytes | None, raw_meta: bytes | None) -> VersionedValue | None:
    """A value read with its metadata, or ``None`` when it is absent or has expired."""
    if raw is None:
        return None
    version, expires = version_and_expiry(raw_meta)
    if expires is not None and expires <= _now_micros():
        return None
    return VersionedValue(_field_text(raw), version)


def _entry(key: str, raw: bytes | None, raw_meta: bytes | None, is_task: bool, now: int) -> StateEntry | None:
    """A key's entry from its value and metadata, or ``None`` when it is absent or has expired."""
    meta = parse_meta(raw_meta, is_task)
    if raw is None or meta.expired(now):
        return None
    return StateEntry(key, _field_text(raw), **vars(meta))  # Meta names its fields as StateEntry does


def _hmget_pair(names: list[str], fields: list[bytes]) -> _Multi:
    """The values and metadata of *fields*, read together so each value comes with its write's metadata."""
    return _Multi((("hmget", names[0], fields), ("hmget", names[1], fields)))


def _written(key: str, if_version: int | None, reply: list[Any]) -> int:
    """The new version from the WRITE script's reply, or the conflict it reports."""
    status, version = reply
    if status == 0:
        assert if_version is not None  # the script reports a conflict only for a conditional write
        raise StateConflictError(key, if_version, int(version))
    return int(version)


def _describe_layout(topology: Topology) -> str:
    """The set-up in the words of its options, for connection errors ("" for one server)."""
    if topology.mode == "sentinel":
        sentinels = ",".join(f"{host}:{port}" for host, port in topology.sentinels)
        return (
            f"[state_redis] mode = sentinel, sentinel_master = {topology.sentinel_master}, "
            f"sentinels = {sentinels}"
        )
    if topology.mode == "cluster":
        return "[state_redis] mode = cluster (url names any node of the cluster)"
    return ""


def _counted(key: str, by: int, reply: list[bytes | int]) -> int:
    """The new integer from the INCREMENT script's reply, or the error for the value it refused."""
    status, text = reply
    assert isinstance(text, bytes)
    if status == 0:
        return int(text)
    stored = _field_text(text)
    # The shared helper words the refusal exactly as every other backend does.
    incremented(key, stored, by)
    raise ValueError(  # only for input the helper would accept and Redis not (non-ASCII whitespace)
        f"state key {key!r} holds {stored[:40]!r}, which Redis cannot increment as a 64-bit integer; "
        "nothing was written"
    )


@dataclass
class _AsyncConnection:
    client: _AsyncClient
    scripts: dict[str, AsyncScript]
    # redis-py's async cluster client loads the slot map on first use, and several coroutines
    # doing so at once can share a connection still being opened ('NoneType' object has no
    # attribute 'writelines'): the first caller loads it, the others wait.
    ready: bool = False
    ready_lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    async def ensure_ready(self) -> _AsyncConnection:
        if not self.ready:
            async with self.ready_lock:
                if not self.ready:
                    if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
                        await self.client.initialize()
                    self.ready = True
        return self


class RedisStateBackend(BaseStateBackend):
    """
    Keeps task and asset state in Redis, with versions, per-key expiry and atomic increments.

    Task state needs ``TaskScope.dag_run_uid`` (``ValueError`` without it). Key layout and TTLs
    (:mod:`._keys`), Cluster and Sentinel (:mod:`._clients`), retries applied once
    (``_scripts._once``) and ``WAIT`` (:mod:`._durable`): see docs/redis.md. Settings not passed
    are read from ``[state_redis]`` (when Airflow is importable), then ``AIRFLOW__STATE_REDIS__*``.

    :param url: a redis-py URL (``redis://``, ``rediss://`` or ``unix://``).
    :param key_prefix: the first component of every key; default ``airflow:state``.
    :param task_ttl_seconds: lifetime of a task instance's state after its last write; ``None``
        or 0: only per-key expiry (and the dag run's state never goes by itself).
    :param asset_ttl_seconds: the same for an asset's state; ``None`` or 0 (the default): none.
    :param topology: the servers' layout and replication settings; by default from
        ``[state_redis] mode``, ``sentinel_*``, ``wait_replicas``, ``wait_timeout_ms``, ``retries``.
    """

    supports_versions = True
    supports_expiry = True
    supports_increment = True
    # Batches are one Lua script (writes) or one MULTI/EXEC (reads): all or nothing, never half seen.
    supports_atomic_many = True
    # A commit is one MULTI/EXEC of the write scripts and its record, under WATCH (one hash slot in
    # Cluster mode).
    supports_atomic_commit = True

    def __init__(
        self,
        url: str | None = None,
        *,
        key_prefix: str | None = None,
        task_ttl_seconds: int | Unset | None = UNSET,
        asset_ttl_seconds: int | Unset | None = UNSET,
        topology: Topology | None = None,
    ) -> None:
        self._settings: RedisSettings = resolve_settings(
            url, key_prefix, task_ttl_seconds, asset_ttl_seconds, topology
        )
        self._keys = KeyLayout(self._settings.key_prefix)
        self._layout = _describe_layout(self._settings.topology)
        # redis-py connects lazily: building the backend does no I/O, so resolving the backend
        # class (e.g. in `airflow config` or at import) never waits on the network.
        self._sync_lock = threading.Lock()
        self._sync_state: tuple[_SyncClient, dict[str, Script]] | None = None
        try:
            if self._settings.topology.mode == "cluster":
                # A cluster client reads the slot map as it is built: that waits until first use.
                redis.connection.parse_url(self._settings.url)
            else:
                self._connect_sync()
        except ValueError as error:  # what _check_url does not look at, e.g. "?socket_timeout=abc"
            raise invalid_url(self._settings.url, self._settings.url_source, error) from None
        self._async: PerLoop[_AsyncConnection] = PerLoop(
            self._connect_async, lambda connection: connection.client.aclose()
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(url={mask_url(self._settings.url)!r}, "
            f"key_prefix={self._settings.key_prefix!r}, mode={self._settings.topology.mode!r})"
        )

    # --- the contract: each operation an _Op, run by _sync and _async ---------------------------

    def _op_get(self, scope: StateScope, key: str, *, session: Any = None) -> _Op[str | None]:
        found = yield from self._op_get_versioned(scope, key)
        return None if found is None else found.value

    def _op_get_versioned(
        self, scope: StateScope, key: str, *, session: Any = None
    ) -> _Op[VersionedValue | None]:
        return _visible(*(yield self._value_and_meta(scope, key)))

    def _op_get_entry(self, scope: StateScope, key: str, *, session: Any = None) -> _Op[StateEntry | None]:
        raw, raw_meta = yield self._value_and_meta(scope, key)
        return _entry(key, raw, raw_meta, isinstance(scope, TaskScope), _now_micros())

    def _op_set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> _Op[None]:
        yield from self._op_set_by_try(scope, key, value, try_number=None)

    def _op_set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> _Op[None]:
        if try_number is not None and (not isinstance(try_number, int) or isinstance(try_number, bool)):
            raise TypeError(
                f"try_number must be an int or None, got {type(try_number).__name__}: {try_number!r}"
            )
        yield self._write_call("write", scope, None, None, *self._pair(key, value), "", try_number=try_number)

    def _op_write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> _Op[int]:
        expected = "" if if_version is None else str(if_version)
        pair = self._pair(key, value)
        call = self._write_call("write", scope, writer, expires_at, *pair, expected, if_version=if_version)
        return _written(key, if_version, (yield call))

    def _op_increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> _Op[int]:
        validate_increment(by)
        validate_key(key)
        call = self._write_call("increment", scope, writer, expires_at, _utf8(key), str(by))
        return _counted(key, by, (yield call))

    def _op_delete(self, scope: StateScope, key: str, *, session: Any = None) -> _Op[None]:
        _validate_scope(scope)
        validate_key(key)
        yield from self._op_delete_many(scope, [key])

    def _op_clear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None
    ) -> _Op[None]:
        _validate_scope(scope)
        if isinstance(scope, TaskScope) and all_map_indices:
            args = [self._keys.task_base(scope) + ":", META_SUFFIX]
            yield _Script("clear_all", [self._keys.task_index(scope)], args)
        else:
            keys, map_index = self._scope_keys(scope)
            yield _Script("clear_one", keys, [map_index])

    def _op_get_many(
        self, scope: StateScope, keys: Iterable[str], *, session: Any = None
    ) -> _Op[dict[str, str]]:
        """Values of *keys*: one MULTI/EXEC of two HMGETs, so a batch is never seen half written."""
        _validate_scope(scope)
        wanted = validate_many_keys(keys)
        if not wanted:
            return {}
        values, metas = yield _hmget_pair(self._keys.names(scope), [_utf8(key) for key in wanted])
        found = {}
        for key, raw, raw_meta in zip(wanted, values, metas, strict=True):
            if (visible := _visible(raw, raw_meta)) is not None:
                found[key] = visible.value
        return found

    def _op_set_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> _Op[dict[str, int | None]]:
        _validate_scope(scope)
        checked = validate_many_values(values)
        validate_write(writer, expires_at)  # also when there is nothing to write
        pairs = [part for key, value in checked.items() for part in self._pair(key, value)]
        if not pairs:
            return {}
        versions = yield self._write_call("set_many", scope, writer, expires_at, *pairs)
        return {key: int(version) for key, version in zip(checked, versions, strict=True)}

    def _op_delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> _Op[None]:
        _validate_scope(scope)
        fields = [_utf8(key) for key in validate_many_keys(keys)]
        if fields:
            names, map_index = self._scope_keys(scope)
            yield _Script("delete_many", names, [map_index, *fields])

    def _op_discard_written_through_try(
        self, scope: TaskScope, try_number: int, *, session: Any = None
    ) -> _Op[int]:
        """One script (the default lists, then deletes: a newer try's write in between would go)."""
        validate_discard(scope, try_number)
        _validate_scope(scope)
        names, map_index = self._scope_keys(scope)
        names.append(self._keys.call_marker(scope, uuid.uuid4().hex))
        return int((yield _Script("discard_through_try", names, [map_index, try_number])))

    def _op_keys(self, scope: StateScope, *, session: Any = None) -> _Op[list[str]]:
        _validate_scope(scope)
        fields = yield _Script("live_fields", self._keys.names(scope), [_now_micros()])
        return sorted(_field_text(field) for field in fields)

    def _op_entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> _Op[StateEntryPage]:
        _validate_scope(scope)
        validate_listing(key_prefix, offset, limit)
        names = self._keys.names(scope)
        now = _now_micros()
        fields = yield _Script("live_fields", names, [now])
        # Sorted and filtered here, not with HSCAN MATCH: a prefix is text, never a glob pattern,
        # and every backend pages in Python's code-point order.
        keys, total = page_of_keys([_field_text(field) for field in fields], key_prefix, offset, limit)
        if not keys:  # HMGET needs at least one field
            return StateEntryPage([], total)
        values, metas = yield _hmget_pair(names, [_utf8(key) for key in keys])
        is_task = isinstance(scope, TaskScope)
        # A key deleted (or rewritten to expire) since the keys were listed is left out.
        found = [_entry(*row, is_task, now) for row in zip(keys, values, metas, strict=True)]
        return StateEntryPage([entry for entry in found if entry is not None], total)

    get, aget = _sync(_op_get), _async(_op_get)
    get_versioned, aget_versioned = _sync(_op_get_versioned), _async(_op_get_versioned)
    get_entry = _sync(_op_get_entry)
    set, aset = _sync(_op_set), _async(_op_set)
    set_by_try, aset_by_try = _sync(_op_set_by_try), _async(_op_set_by_try)
    write, awrite = _sync(_op_write), _async(_op_write)
    increment, aincrement = _sync(_op_increment), _async(_op_increment)
    delete, adelete = _sync(_op_delete), _async(_op_delete)
    clear, aclear = _sync(_op_clear), _async(_op_clear)
    get_many, aget_many = _sync(_op_get_many), _async(_op_get_many)
    set_many, aset_many = _sync(_op_set_many), _async(_op_set_many)
    delete_many, adelete_many = _sync(_op_delete_many), _async(_op_delete_many)
    discard_written_through_try = _sync(_op_discard_written_through_try)
    keys, akeys = _sync(_op_keys), _async(_op_keys)
    entries = _sync(_op_entries)

    def key_counts(self, scopes: Sequence[StateScope], *, session: Any = None) -> list[int]:
        scopes = list(scopes)
        for scope in scopes:
            _validate_scope(scope)
        if not scopes:
            return []
        now = _now_micros()
        with self._reachable():
            client = self._client
            if isinstance(client, redis.cluster.RedisCluster):
                return self._cluster_counts(client, scopes, now)
            try:
                return self._pipelined_counts(client, scopes, now)
            except redis.exceptions.NoScriptError:
                # A failover between loading the script and running it (see _durable): again.
                return self._pipelined_counts(client, scopes, now)

    # --- staged writes: one commit, one transaction -----------------------------------------

    def apply_commit(self, commit: StagedCommit, *, session: Any = None) -> bool:
        """
        One MULTI/EXEC under WATCH of every hash the commit touches and of its record: a concurrent
        write to one makes EXEC apply nothing, and the commit is read and tried again. The record is
        a key of its own in the committing task's slot (:meth:`._keys.KeyLayout.commit_record`).
        Redis Cluster runs a transaction on one hash slot only, so a commit spanning several (task
        and asset state do) is refused.
        """
        if not isinstance(commit, StagedCommit):
            raise TypeError(f"commit must be a StagedCommit, got {type(commit).__name__}")
        scopes = list(dict.fromkeys([commit.ledger, *(write.scope for write in commit.writes)]))
        record = self._keys.commit_record(commit.ledger, commit.commit_id)
        watched = [name for scope in scopes for name in self._scope_keys(scope)[0]] + [record]
        with self._reachable():
            client = self._client
            if isinstance(client, redis.cluster.RedisCluster):
                slots = {client.keyslot(name) for name in watched}
                if len(slots) > 1:
                    raise StateCapabilityError(
                        self,
                        "a commit of staged writes to several scopes in Redis Cluster mode (task state "
                        "and each asset's state live in different hash slots, and a transaction spans "
                        "one); in Cluster mode stage writes of the task's own state only, or use "
                        "standalone or Sentinel mode",
                    )
                client = client.get_redis_connection(client.get_node_from_key(watched[0]))
            for _attempt in range(100):
                try:
                    with held_connection(client) as held:
                        return self._commit_watched(held, commit, record, watched)
                except (redis.exceptions.WatchError, ConnectionLost):
                    # Another writer came in between, or the connection broke (perhaps after EXEC
                    # ran): read again, which tells whether the commit is applied.
                    continue
        raise StateConflictError(commit.commit_id, 0, 0)  # 100 rounds of interleaved writers: give up

    def _commit_watched(
        self, held: HeldConnection, commit: StagedCommit, record: str, watched: list[str]
    ) -> bool:
        held.watch(*watched)

        def stored(scope: StateScope, key: str) -> VersionedValue | None:
            name, meta_name = self._keys.names(scope)
            return _visible(held.call("HGET", name, _utf8(key)), held.call("HGET", meta_name, _utf8(key)))

        recorded = held.call("GET", record)
        if recorded is not None:
            # Applied before: a retry after a lost EXEC reply or a refused WAIT, perhaps on no replica
            # yet. WAIT counts only its own connection's writes, so this connection first writes the
            # record again, unchanged: a replica that has that write has the commit, which the
            # replication stream carried before it.
            if self._settings.topology.wait_replicas:
                held.call("SET", record, recorded, "XX", "KEEPTTL")
                self._wait_for_replicas(held, watched)
            return False
        for write in commit.writes:
            if write.op is StagedOp.INCREMENT:
                current = stored(write.scope, write.key)
                incremented(write.key, None if current is None else current.value, write.by)
        ops: list[_Op[Any]] = []
        for write in commit.in_lock_order():
            written: dict[str, Any] = {"writer": commit.writer, "expires_at": write.expires_at}
            if write.op is StagedOp.SET:
                assert write.value is not None  # checked by StagedWrite
                ops.append(self._op_write(write.scope, write.key, write.value, **written))
            elif write.op is StagedOp.INCREMENT:
                ops.append(self._op_increment(write.scope, write.key, write.by, **written))
            else:
                ops.append(self._op_delete(write.scope, write.key))
        # Each operation's first request is its script call, sent here as a single write sends it:
        # EVAL, not EVALSHA, since a script missing on the server would show only at EXEC.
        calls = [next(op) for op in ops]
        commands: list[tuple[Any, ...]] = [
            ("EVAL", SCRIPTS[call.name], len(call.keys), *call.keys, *call.args)
            for call in calls
            if isinstance(call, _Script)
        ]
        assert len(commands) == len(calls)
        commands.append(("SET", record, commit_record(commit.commit_id), "PX", COMMIT_RECORD_SECONDS * 1000))
        replies = held.transaction(commands)
        if replies is None:
            raise redis.exceptions.WatchError("a watched key changed: EXEC applied nothing")
        # Nothing queued can be refused: the reads under WATCH checked every increment.
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if self._settings.topology.wait_replicas:
            self._wait_for_replicas(held, watched)
        return True

    def _wait_for_replicas(self, held: HeldConnection, watched: list[str]) -> None:
        """``WAIT`` for the writes of the *held* connection, on that connection."""
        topology = self._settings.topology
        acknowledged = held.call("WAIT", topology.wait_replicas, topology.wait_timeout_ms)
        check_replicated(int(acknowledged), topology.wait_replicas, topology.wait_timeout_ms, watched)

    def _cluster_counts(
        self, client: redis.cluster.RedisCluster, scopes: list[StateScope], now: int
    ) -> list[int]:
        """
        COUNT_LIVE per scope, in one pipeline per primary (the cluster pipeline refuses scripts); on
        a stale slot map, again one scope at a time through the cluster client (counting is harmless).
        """
        by_node: dict[str, list[int]] = {}
        try:
            nodes = {}
            for i, scope in enumerate(scopes):
                node = client.get_node_from_key(self._keys.names(scope)[0])
                nodes[node.name] = node
                by_node.setdefault(node.name, []).append(i)
            counts = [0] * len(scopes)
            for name, positions in by_node.items():
                node_client = client.get_redis_connection(nodes[name])
                found = self._pipelined_counts(node_client, [scopes[i] for i in positions], now)
                for i, count in zip(positions, found, strict=True):
                    counts[i] = count
            return counts
        except (*CLUSTER_RETRIED, redis.exceptions.NoScriptError):
            count_live = self._scripts["count_live"]
            return [int(count_live(keys=self._keys.names(scope), args=[now])) for scope in scopes]

    def _pipelined_counts(self, client: redis.Redis, scopes: list[StateScope], now: int) -> list[int]:
        # Counts only, no writes: a plain pipeline (one round trip) needs no MULTI.
        with client.pipeline(transaction=False) as pipe:
            for scope in scopes:
                self._scripts["count_live"](keys=self._keys.names(scope), args=[now], client=pipe)
            return [int(count) for count in pipe.execute()]

    def cleanup(
        self,
        *,
        now: datetime,
        updated_before: datetime | None = None,
        batch_size: int = 1000,
        dry_run: bool = False,
        session: Any = None,
    ) -> int:
        """
        ``SCAN`` finds the metadata hashes, ``HSCAN`` reads each; the CLEAN script checks every
        picked key again, so a key written again in the meantime stays.
        """
        validate_cleanup(now, updated_before, batch_size)
        now_micros = micros(now)
        before = None if updated_before is None else micros(updated_before)
        removed = 0
        with self._reachable():
            for keys, map_index in self._metadata_hashes(batch_size):
                removed += self._clean_hash(keys, map_index, now_micros, before, batch_size, dry_run)
        return removed

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync connection pool; async clients close with their event loop."""
        if self._sync_state is not None:
            self._sync_state[0].close()
        self._async.forget_all()

    async def aclose(self) -> None:
        """Close the running loop's async client and the sync connection pool."""
        await self._async.close_current()
        if self._sync_state is not None:
            self._sync_state[0].close()

    # --- plumbing ------------------------------------------------------------------------

    def _run(self, op: _Op[T]) -> T:
        with self._reachable():
            try:
                request = next(op)
                while True:
                    request = op.send(self._send(request))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _arun(self, op: _Op[T]) -> T:
        with self._reachable():
            try:
                request = next(op)
                while True:
                    request = op.send(await self._asend(request))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _send(self, request: _Script | _Multi) -> Any:
        if isinstance(request, _Script):
            return self._apply(request)
        with self._client.pipeline(transaction=True) as pipe:
            for command, *args in request.commands:
                getattr(pipe, command)(*args)
            return pipe.execute()

    async def _asend(self, request: _Script | _Multi) -> Any:
        if isinstance(request, _Script) and self._waits(request):
            # WAIT must follow the write on its connection; the sync path does that for every
            # layout (a cluster needs the slot's node itself), so it runs in a worker thread.
            return await asyncio.to_thread(self._apply, request)
        connection = await (await self._async.get()).ensure_ready()
        if isinstance(request, _Script):
            return await connection.scripts[request.name](keys=request.keys, args=request.args)
        async with connection.client.pipeline(transaction=True) as pipe:
            for command, *args in request.commands:
                getattr(pipe, command)(*args)
            return await pipe.execute()

    def _waits(self, call: _Script) -> bool:
        """Whether *call* is a write followed by ``WAIT`` (``[state_redis] wait_replicas``)."""
        return bool(self._settings.topology.wait_replicas) and call.name not in READ_ONLY

    def _apply(self, call: _Script) -> Any:
        """Run a script with the sync client; a write waits for the replicas when configured."""
        script = self._scripts[call.name]
        topology = self._settings.topology
        with self._reachable():
            if not self._waits(call):
                return script(keys=call.keys, args=call.args)
            return write_and_wait(
                self._client,
                script,
                call.keys,
                call.args,
                replicas=topology.wait_replicas,
                timeout_ms=topology.wait_timeout_ms,
            )

    def _reachable(self) -> AbstractContextManager[None]:
        return reachable(self._settings.url, self._settings.url_source, self._layout)

    @property
    def _client(self) -> _SyncClient:
        return self._connect_sync()[0]

    @property
    def _scripts(self) -> dict[str, Script]:
        return self._connect_sync()[1]

    def _connect_sync(self) -> tuple[_SyncClient, dict[str, Script]]:
        """The sync client and its scripts, built on first use (see ``__init__``)."""
        state = self._sync_state
        if state is None:
            with self._sync_lock:
                if self._sync_state is None:
                    try:
                        client = build_client(self._settings, sync=True)
                    except redis.exceptions.RedisClusterException as error:
                        # "cannot be connected" (no seed answers) and the like: a connection problem
                        # for every caller, so _reachable words it for the deployer.
                        raise redis.exceptions.ConnectionError(str(error)) from error
                    scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
                    self._sync_state = (client, scripts)
                state = self._sync_state
        return state

    def _connect_async(self) -> _AsyncConnection:
        client = build_client(self._settings, sync=False)
        return _AsyncConnection(
            client, {name: client.register_script(text) for name, text in SCRIPTS.items()}
        )

    def _value_and_meta(self, scope: StateScope, key: str) -> _Multi:
        _validate_scope(scope)
        validate_key(key)
        (name, meta_name), field = self._keys.names(scope), _utf8(key)
        # A MULTI/EXEC, not a script: as atomic, and a fraction of the server time of EVALSHA.
        return _Multi((("hget", name, field), ("hget", meta_name, field)))

    def _pair(self, key: str, value: str) -> tuple[bytes, bytes]:
        validate_key(key)
        validate_value(value)
        return _utf8(key), _utf8(value, "value")

    def _scope_keys(self, scope: StateScope) -> tuple[list[str], str]:
        """KEYS of a script that writes or deletes, and the map index it records (``""``: asset)."""
        keys = self._keys.names(scope)
        map_index = ""
        if isinstance(scope, TaskScope):
            keys.append(self._keys.task_index(scope))
            map_index = str(scope.map_index)
        return keys, map_index

    def _write_call(
        self,
        name: str,
        scope: StateScope,
        writer: StateWriter | None,
        expires_at: datetime | None,
        *args: bytes | str,
        try_number: int | None = None,
        if_version: int | None = None,
    ) -> _Script:
        """The call of write script *name*: the shared ARGV[1..6] (see :mod:`._scripts`), then *args*."""
        _validate_scope(scope)
        writer_try = validate_write(writer, expires_at, if_version)
        if writer is not None:
            try_number = writer_try
        now = _now_micros()
        keys, map_index = self._scope_keys(scope)
        if isinstance(scope, TaskScope):
            # Task state records the try; the map-index set is kept alive with every hash of the
            # task, so it always outlives them and clearing all map indexes never misses one.
            ttl, writer = self._settings.task_ttl_seconds, None
        else:
            # Asset state belongs to no task instance: it records the whole writer, no try.
            ttl, try_number = self._settings.asset_ttl_seconds, None
        # Last of KEYS: this call's marker, so a retry of it (same arguments) applies it once.
        keys.append(self._keys.call_marker(scope, uuid.uuid4().hex))
        head, tail = meta_parts(now, try_number, expires_at, writer)
        expires_in_ms = ""
        if expires_at is not None and (left := micros(expires_at) - now) > 0:
            expires_in_ms = str(-(-left // 1000))  # rounded up: the hash must not go first
        ttl_ms = str(ttl * 1000) if ttl else ""
        return _Script(name, keys, [now, head, tail, ttl_ms, expires_in_ms, map_index, *args])

    # --- cleanup -------------------------------------------------------------------------

    def _metadata_hashes(self, batch_size: int) -> Iterator[tuple[list[str], str]]:
        """Every metadata hash of this prefix, once each, with the keys a CLEAN call needs."""
        seen: set[bytes] = set()
        for pattern, shape in self._keys.metadata_patterns():
            for raw in self._client.scan_iter(match=pattern, count=batch_size, _type="hash"):
                # SCAN may return a name twice, and its glob may match another deployment's key
                # whose prefix starts with ours: only names of exactly our layout are taken.
                if raw in seen or not shape.fullmatch(name := _field_text(raw)):
                    continue
                seen.add(raw)
                yield self._keys.clean_keys(name)

    def _clean_hash(
        self, keys: list[str], map_index: str, now: int, before: int | None, batch_size: int, dry_run: bool
    ) -> int:
        due: dict[bytes, None] = {}  # HSCAN may return a field twice; a dry run must not count it twice
        for field, raw_meta in self._client.hscan_iter(keys[1], count=batch_size):
            meta = parse_meta(raw_meta, is_task=False)
            if meta.expired(now) or (
                before is not None and meta.updated_at is not None and micros(meta.updated_at) < before
            ):
                due[field] = None
        fields = list(due)
        flags = [now, "" if before is None else before, "1" if dry_run else "0", map_index]
        return sum(
            int(self._apply(_Script("clean", keys, [*flags, *fields[i : i + batch_size]])))
            for i in range(0, len(fields), batch_size)
        )
