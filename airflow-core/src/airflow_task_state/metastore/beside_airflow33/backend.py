"""
The metastore on Airflow 3.3 (:mod:`airflow_task_state.airflow_line`): a key is a row of Airflow's
``task_state_store`` or ``asset_state_store``, which Airflow's accessors, REST API, UI and
``airflow state-store clean`` read and write too, and its meta row (:mod:`.models`) says what those
rows lack.

A read is one statement: the row joined with its meta row. A meta row that is not current (its
``updated_at`` is not the row's: one of Airflow's own writers changed the value since) describes an
earlier value, so the key reads with the version after the one recorded (1 without any), no try, and
for an asset the writer Airflow recorded and no expiry (Airflow's asset rows have none).

A write is one transaction: it locks the meta rows of its keys (creating them where the dag run or
asset exists), reads the rows and meta rows, checks what the write requires (``if_version``, an
integer to add to), then writes both with one time; on PostgreSQL (psycopg2) a write with nothing
to check is the lock and one statement, sent together (:func:`.statements.write_at_once`).
Concurrent writes of ours queue on the meta rows' locks, and read after them: none works from a
stale read. Airflow's own writers take no lock of ours: between them and us the last writer wins,
as between two of theirs.

As on Airflow 3.2, calls without a caller's session run statements built once
(:mod:`.statements`) on the autocommit engine's pooled connections
(:mod:`airflow_task_state.airflow_db.engine`): a read as one statement, a write or delete as one
transaction on one connection. With a caller's session they run the same SQL on its connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypeVar
from uuid import UUID

from airflow._shared.timezones import timezone
from airflow.utils.session import create_session
from airflow_shared.state import (
    COMMIT_RECORDS_TASK_ID,
    StateCapabilityError,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    VersionedValue,
    WriterKind,
    incremented,
    validate_cleanup,
    validate_discard,
    validate_increment,
    validate_key,
    validate_listing,
    validate_many_keys,
    validate_many_values,
    validate_scope,
    validate_value,
    validate_write,
)
from airflow_shared.state.entries import page_of_keys
from sqlalchemy import and_, delete, exists, func, or_, select, tuple_
from sqlalchemy.orm import Session

from airflow_task_state.airflow_db import event_loop
from airflow_task_state.airflow_db.engine import (
    Outcome,
    Run,
    autocommit_engine,
    committing_session,
    execute,
    transaction,
)
from airflow_task_state.exceptions import StateConflictError, TryNotRunning
from airflow_task_state.metastore.backend import DatabaseBackend
from airflow_task_state.metastore.beside_airflow33 import statements as sql
from airflow_task_state.metastore.beside_airflow33.statements import ASSET, TASK, Tables
from airflow_task_state.metastore.listing import entry as _entry
from airflow_task_state.metastore.operations import in_session, missing_parent
from airflow_task_state.metastore.statements import padded, params

T = TypeVar("T")
_OneKey = Literal["", "value", "versioned"]  # what _rows reads: entries (""), or one key's value
# Airflow's asset rows name their writer with the kinds its API knows: "cli" writes as "api".
_AIRFLOW_WRITER_KIND = {WriterKind.TASK: "task", WriterKind.API: "api", WriterKind.CLI: "api"}


def _tables(scope: StateScope) -> Tables:
    return TASK if isinstance(scope, TaskScope) else ASSET


class _Stored(NamedTuple):
    """A key as a write finds it, expired or not."""

    value: str
    version: int
    live: bool


def _run_one(statement: Any, values: dict[str, Any], session: Session | None) -> Outcome:
    """One statement: autocommitted, or on the caller's *session*."""
    return (
        execute(statement, values) if session is None else in_session(session.connection(), statement, values)
    )


def _transaction(session: Session | None, work: Callable[[Run], T]) -> T:
    """*work* in a transaction of its own, or in the caller's *session* (the caller commits)."""
    if session is None:
        return transaction(work)
    connection = session.connection()

    def run(statements: Sequence[Any], values: dict[str, Any], last: bool = False) -> Outcome:
        return [in_session(connection, statement, values) for statement in statements][-1]

    return work(run)


def _fits(session: Session | None, keys: Iterable[str]) -> list[str]:
    """
    The *keys* that can be stored. Airflow 3.3 keeps keys in utf8mb3 with a PAD SPACE collation on
    MySQL: a character outside the Basic Multilingual Plane cannot be stored, and ``"key "`` would be
    the row of ``"key"``.
    """
    dialect = (autocommit_engine() if session is None else session.get_bind()).dialect
    if dialect.name != "mysql":
        return list(keys)
    return [key for key in keys if not key.endswith(" ") and all(ord(c) <= 0xFFFF for c in key)]


def _keyed(keys: list[str]) -> dict[str, str]:
    return {f"key_{n}": key for n, key in enumerate(keys)}


def _writer_values(writer: StateWriter | None, expires_at: datetime | None) -> dict[str, Any]:
    """What a write binds of its writer and expiry, in the columns of both tables."""
    # StateWriter's fields: kind, the task instance (dag_id, run_id, task_id, map_index), the try.
    kind, *task_instance, tried = (writer.kind, *writer.task_instance_and_try) if writer else (None,) * 6
    written_by = (f"last_updated_by_{name}" for name in ("dag_id", "run_id", "task_id", "map_index"))
    return {
        "expires_at": expires_at,
        "updated_by_try": tried,
        "updated_by": kind and kind.value,
        "last_updated_by_kind": kind and _AIRFLOW_WRITER_KIND[kind],
        **dict(zip(written_by, task_instance, strict=True)),
    }


def _read(
    scope: StateScope, keys: Iterable[str] | None, session: Session | None, one: _OneKey
) -> tuple[Any, dict[str, Any]] | None:
    """The statement, and its values, of Airflow33MetastoreBackend._rows; ``None``: no key can be stored."""
    validate_scope(scope)
    values = params(scope)
    values["now"] = timezone.utcnow()
    size = 0
    if keys is not None:
        storable = padded(_fits(session, keys))  # no other is stored
        if not storable:
            return None
        values |= _keyed(storable)
        size = len(storable)
    tables = _tables(scope)
    return sql.select_value(tables, one == "versioned") if one else sql.select_entries(tables, size), values


def _at_once(
    scope: StateScope,
    values: dict[str, str],
    writer: StateWriter | None,
    expires_at: datetime | None,
    running_try: tuple[str, int | None] | None,
) -> tuple[tuple[Any, Any], dict[str, Any]]:
    """
    The statements of a write of *values* (key: value) that does not depend on what is stored
    (:func:`.statements.write_at_once`), and their values; *running_try*: (task instance id, try),
    written only while that try runs.
    """
    keys = list(values)
    bound = params(scope) | _keyed(keys) | _writer_values(writer, expires_at)
    bound |= {f"value_{n}": value for n, value in enumerate(values.values())}
    bound["now"] = bound["updated_at"] = timezone.utcnow()
    if running_try is not None:
        bound["running_ti_id"], bound["running_try"] = UUID(running_try[0]), running_try[1]
    return sql.write_at_once(_tables(scope), len(keys), while_running=running_try is not None), bound


def _running_write(
    scope: StateScope, key: str, value: str, writer: StateWriter, expires_at: datetime | None, ti_id: str
) -> tuple[str, int | None]:
    """A running try's write checked as :meth:`~Airflow33MetastoreBackend.write` checks; (ti_id, try)."""
    validate_scope(scope)
    validate_key(key)
    validate_value(value)
    validate_write(writer, expires_at, None)
    return ti_id, writer.try_number


def _written_at_once(
    scope: StateScope, values: dict[str, str], rows: list[Any], running_try: tuple[str, int | None] | None
) -> dict[str, tuple[str, int]]:
    """(value, version) of each key :func:`_at_once` wrote, from the *rows* it returned."""
    if not rows:  # no parent, or the try does not run: nothing written
        raise missing_parent(scope) if running_try is None else TryNotRunning(running_try[0])
    versions = dict(rows)
    return {key: (value, versions[key]) for key, value in values.items()}


class Airflow33MetastoreBackend(DatabaseBackend):
    """State in Airflow 3.3's state store, with versions, expiry and writers kept beside it."""

    # --- reads -----------------------------------------------------------------------------

    def _rows(
        self, scope: StateScope, keys: Iterable[str] | None, session: Session | None, *, one: _OneKey = ""
    ) -> list[Any]:
        """The entries' rows of the live *keys* (all without), or *one* key's "value" or "versioned" value."""
        read = _read(scope, keys, session, one)
        return [] if read is None else _run_one(*read, session).rows

    def serves_on_event_loop(self) -> bool:
        """Whether its plain get and set run on the API server's event loop (airflow_db.event_loop)."""
        return event_loop.available()

    async def get_versioned_on_event_loop(self, scope: StateScope, key: str) -> VersionedValue | None:
        """:meth:`get_versioned` on the API server's event loop, where :meth:`serves_on_event_loop`."""
        validate_key(key)
        read = _read(scope, [key], None, "versioned")
        rows = [] if read is None else (await event_loop.execute(*read)).rows
        return VersionedValue(*rows[0]) if rows else None

    def get_entry(self, scope: StateScope, key: str, *, session: Any = None) -> StateEntry | None:
        validate_key(key)
        rows = self._rows(scope, [key], session)
        return _entry(scope, rows[0]) if rows else None

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        validate_key(key)
        rows = self._rows(scope, [key], session, one="value")
        return rows[0][0] if rows else None

    def get_versioned(self, scope: StateScope, key: str, *, session: Any = None) -> VersionedValue | None:
        validate_key(key)
        rows = self._rows(scope, [key], session, one="versioned")
        return VersionedValue(*rows[0]) if rows else None

    def get_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> dict[str, str]:
        wanted = validate_many_keys(keys, "get_many")
        return {row[0]: row[1] for row in self._rows(scope, wanted, session)} if wanted else {}

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        return sorted(row[0] for row in self._rows(scope, None, session))

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> StateEntryPage:
        validate_listing(key_prefix, offset, limit)
        every = {row[0]: row for row in self._rows(scope, None, session)}
        page, total = page_of_keys(list(every), key_prefix, offset, limit)
        return StateEntryPage([_entry(scope, every[key]) for key in page], total)

    # --- writes ----------------------------------------------------------------------------

    def _write(
        self,
        scope: StateScope,
        keys: list[str],
        value_of: Callable[[str, _Stored | None], str],
        writer: StateWriter | None,
        expires_at: datetime | None,
        session: Session | None,
        plain: bool = False,
        running_try: tuple[str, int | None] | None = None,
    ) -> dict[str, tuple[str, int]]:
        """
        Lock the meta rows of *keys*, read what is stored under them, and write what *value_of*
        makes of each (or raises), at the next version: one transaction. The (value, version) of each.
        *plain*: the values do not depend on what is stored (:func:`.statements.write_at_once`).
        *running_try*: (task instance id, try): a plain write on psycopg2 (the only caller's path) only
        while that try runs.
        """
        if len(fitting := _fits(session, keys)) < len(keys):
            key = next(key for key in keys if key not in fitting)
            raise StateCapabilityError(
                "The metastore on MySQL with Airflow 3.3",
                f"key {key!r:.80}: Airflow 3.3's state store keeps keys as utf8mb3 text, which holds no "
                "character outside the Basic Multilingual Plane (emoji, for one) and ignores trailing spaces",
                "use another key; nothing was written",
            )
        if plain and session is None and autocommit_engine().dialect.driver == "psycopg2":
            # One round trip, not two: nothing to check between the lock and the writes.
            new_values = {key: value_of(key, None) for key in keys}
            rows = execute(*_at_once(scope, new_values, writer, expires_at, running_try)).rows
            return _written_at_once(scope, new_values, rows, running_try)
        tables, size = _tables(scope), len(keys)
        values = params(scope) | _keyed(keys) | _writer_values(writer, expires_at)

        def work(run: Run) -> dict[str, tuple[str, int]]:
            values["now"] = values["updated_at"] = now = timezone.utcnow()
            # A statement of its own after the lock: a write of ours committed meanwhile is read.
            found = run([sql.lock(tables, size), sql.read_locked(tables, size)], values).rows
            if not found:
                raise missing_parent(scope)
            values[tables.scope_columns[0]] = found[0][1]  # the dag run's id (the asset's)
            stored = {
                key: _Stored(value, version, expires is None or expires > now)
                for key, _, value, version, expires in found
                if value is not None
            }
            written = {}
            for n, key in enumerate(keys):
                found_key = stored.get(key)
                written[key] = value_of(key, found_key), (found_key.version if found_key else 0) + 1
                values[f"value_{n}"], values[f"version_{n}"] = written[key]
            run(sql.writes(tables, size), values, last=True)
            return written

        return _transaction(session, work)

    def write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int:
        validate_scope(scope)
        validate_key(key)
        validate_value(value)
        validate_write(writer, expires_at, if_version)

        def checked(key: str, found: _Stored | None) -> str:
            visible = found.version if found is not None and found.live else 0
            if if_version is not None and visible != if_version:
                raise StateConflictError(key, if_version, visible)
            return value

        plain = if_version is None
        return self._write(scope, [key], checked, writer, expires_at, session, plain)[key][1]

    def write_while_running(
        self,
        scope: TaskScope,
        key: str,
        value: str,
        writer: StateWriter,
        expires_at: datetime | None,
        ti_id: str,
    ) -> int | None:
        """
        As the 3.2 metastore's: :meth:`write` without ``if_version`` by *writer*, the running try of
        task instance *ti_id*, whose statements check that the try runs (``TryNotRunning`` when they
        wrote nothing). ``None``, nothing written, where a write is not one round trip (but on
        PostgreSQL with psycopg2): there the state API checks the try in a statement of its own.
        """
        if autocommit_engine().dialect.driver != "psycopg2":
            return None
        running_try = _running_write(scope, key, value, writer, expires_at, ti_id)
        written = self._write(scope, [key], lambda *_: value, writer, expires_at, None, True, running_try)
        return written[key][1]

    async def write_while_running_on_event_loop(
        self,
        scope: TaskScope,
        key: str,
        value: str,
        writer: StateWriter,
        expires_at: datetime | None,
        ti_id: str,
    ) -> int:
        """
        :meth:`write_while_running` on the API server's event loop, where :meth:`serves_on_event_loop`:
        its lock and its write one transaction (four round trips with asyncpg, not one message).
        """
        running_try = _running_write(scope, key, value, writer, expires_at, ti_id)
        statements = _at_once(scope, {key: value}, writer, expires_at, running_try)
        rows = (await event_loop.execute(*statements)).rows
        return _written_at_once(scope, {key: value}, rows, running_try)[key][1]

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        self.write(scope, key, value, session=session)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        writer = None
        if try_number is not None and isinstance(scope, TaskScope):
            writer = StateWriter.task_try(
                scope.dag_id, scope.run_id, scope.task_id, scope.map_index, try_number
            )
        self.write(scope, key, value, writer=writer, session=session)

    def set_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> dict[str, int | None]:
        validate_scope(scope)
        checked = validate_many_values(values)
        validate_write(writer, expires_at)
        if not checked:
            return {}

        written = self._write(
            scope, list(checked), lambda key, _: checked[key], writer, expires_at, session, plain=True
        )
        return {key: version for key, (_, version) in written.items()}

    def increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        validate_scope(scope)
        validate_key(key)
        validate_increment(by)
        validate_write(writer, expires_at)

        def added(key: str, found: _Stored | None) -> str:
            return str(incremented(key, found.value if found and found.live else None, by))

        return int(self._write(scope, [key], added, writer, expires_at, session)[key][0])

    def _delete(
        self, scope: StateScope, session: Session | None, keys: list[str] | None = None, **scope_options: Any
    ) -> None:
        """Delete the rows of *keys* (all of the scope's without) and their meta rows: one transaction."""
        values = params(scope)
        if keys is not None:
            keys = padded(keys)
            values |= _keyed(keys)
        statements = sql.deletes(_tables(scope), len(keys or ()), **scope_options)
        _transaction(session, lambda run: run(statements, values, last=True))

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        validate_scope(scope)
        validate_key(key)
        self._delete(scope, session, [key])

    def delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> None:
        validate_scope(scope)
        doomed = validate_many_keys(keys, "delete_many")
        if doomed:
            self._delete(scope, session, doomed)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        validate_scope(scope)
        self._delete(scope, session, all_map_indices=all_map_indices)

    def discard_written_through_try(self, scope: TaskScope, try_number: int, *, session: Any = None) -> int:
        """One DELETE of the keys whose current meta row records a try up to *try_number*."""
        validate_discard(scope, try_number)
        values = params(scope) | {"through_try": try_number}
        return _run_one(sql.DISCARD_WRITTEN_THROUGH_TRY, values, session).rowcount

    # --- clean-up --------------------------------------------------------------------------

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
        Remove expired keys (and, with *updated_before*, keys not written since; commit records
        only as they expire), each table in batches of one transaction, and meta rows whose key
        Airflow's own surfaces deleted.
        """
        validate_cleanup(now, updated_before, batch_size)
        total = 0
        for tables in (TASK, ASSET):
            removable = [tables.expires_at.is_not(None), tables.expires_at <= now]
            doomed = and_(*removable)
            if updated_before is not None:
                old = tables.rows.c.updated_at < updated_before
                if tables is TASK:
                    old = and_(old, tables.rows.c.task_id != COMMIT_RECORDS_TASK_ID)
                doomed = or_(doomed, old)
            total += sum(self._batches(tables, doomed, batch_size, dry_run))
        return total

    def _batches(self, tables: Tables, doomed: Any, batch_size: int, dry_run: bool) -> Iterator[int]:
        names = [tables.rows.c[name] for name in (*tables.scope_columns, "key")]
        found = select(*names).select_from(tables.joined).where(doomed)
        if dry_run:
            with create_session() as db:
                yield db.scalar(select(func.count()).select_from(found.subquery())) or 0
            return
        meta_names = [tables.meta.c[column.name] for column in names]
        while True:
            with committing_session() as db:
                batch = [tuple(row) for row in db.execute(found.limit(batch_size))]
                if batch:
                    db.execute(delete(tables.rows).where(tuple_(*names).in_(batch)))
                    db.execute(delete(tables.meta).where(tuple_(*meta_names).in_(batch)))
                else:  # last: meta rows whose key Airflow's own surfaces deleted
                    of_their_key = [meta == row for meta, row in zip(meta_names, names, strict=True)]
                    db.execute(delete(tables.meta).where(~exists().where(*of_their_key)))
            if not batch:
                return
            yield len(batch)
