"""
The metastore on Airflow 3.3 (:mod:`airflow_task_state.airflow_line`): a key is a row of Airflow's
``task_state_store`` or ``asset_state_store``, which Airflow's accessors, REST API, UI and
``airflow state-store clean`` read and write too, and its meta row (:mod:`.models`) says what those
rows lack.

A read is one statement: the row joined with its meta row. A meta row that is not current (its
``updated_at`` is not the row's: one of Airflow's own writers changed the value since) describes an
earlier value, so the key reads with the version after the one recorded (1 without any), no try, and
for an asset the writer Airflow recorded and no expiry (Airflow's asset rows have none).

A write is one transaction: it locks the meta rows of its keys (creating them), reads the rows and
meta rows, checks what the write requires (``if_version``, an integer to add to), then writes both
with one time. Concurrent writes of ours queue on the meta rows' locks, and read after them: none
works from a stale read. Airflow's own writers take no lock of ours: between them and us the last
writer wins, as between two of theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow._shared.timezones import timezone
from airflow.models.asset import AssetModel
from airflow.models.asset_state_store import AssetStateStoreModel
from airflow.models.dagrun import DagRun
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.utils.session import create_session
from airflow_shared.state import (
    COMMIT_RECORDS_TASK_ID,
    BaseStateBackend,
    StagedCommit,
    StateCapabilityError,
    StateConflictError,
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
from sqlalchemy import Table, and_, case, delete, exists, func, or_, select, tuple_
from sqlalchemy.orm import Session

from airflow_task_state.airflow_db.engine import committing_session
from airflow_task_state.metastore.beside_airflow33.models import AssetStateMetaModel, TaskStateMetaModel
from airflow_task_state.metastore.listing import stored_writer
from airflow_task_state.metastore.operations import missing_parent


@dataclass(frozen=True)
class _Tables:
    """A scope type's rows (Airflow's) and meta rows (ours), and the columns both name a scope by."""

    rows: Any  # Table: SQLAlchemy types a model's __table__ as any FromClause
    meta: Any
    scope_columns: tuple[str, ...]

    @property
    def joined(self) -> Any:
        same_key = [self.meta.c[name] == self.rows.c[name] for name in (*self.scope_columns, "key")]
        return self.rows.outerjoin(self.meta, and_(*same_key))

    @property
    def current(self) -> Any:
        """The meta row describes the row's value (no meta row: NULL, so not)."""
        return self.meta.c.updated_at == self.rows.c.updated_at

    @property
    def version(self) -> Any:
        return case((self.current, self.meta.c.version), else_=func.coalesce(self.meta.c.version, 0) + 1)

    @property
    def expires_at(self) -> Any:
        if "expires_at" in self.rows.c:
            return self.rows.c.expires_at
        return case((self.current, self.meta.c.expires_at))

    def live(self, now: datetime) -> Any:
        return or_(self.expires_at.is_(None), self.expires_at > now)

    def of_scope(self, scope: StateScope, *, all_map_indices: bool = False) -> list[Any]:
        rows = self.rows.c
        if not isinstance(scope, TaskScope):
            return [rows.asset_id == scope.asset_id]
        of_task = [rows.dag_id == scope.dag_id, rows.run_id == scope.run_id, rows.task_id == scope.task_id]
        return of_task if all_map_indices else [*of_task, rows.map_index == scope.map_index]


_TASK = _Tables(
    TaskStateStoreModel.__table__,
    TaskStateMetaModel.__table__,
    ("dag_run_id", "task_id", "map_index"),
)
_ASSET = _Tables(AssetStateStoreModel.__table__, AssetStateMetaModel.__table__, ("asset_id",))
# Airflow's asset rows name their writer with the kinds its API knows: "cli" writes as "api".
_AIRFLOW_WRITER_KIND = {WriterKind.TASK: "task", WriterKind.API: "api", WriterKind.CLI: "api"}


def _tables(scope: StateScope) -> _Tables:
    return _TASK if isinstance(scope, TaskScope) else _ASSET


def _entry_columns(tables: _Tables) -> list[Any]:
    """What an entry shows of a key: the columns :func:`_entry` reads, in its order."""
    rows, meta = tables.rows.c, tables.meta.c
    columns = [rows.key, rows.value, rows.updated_at, tables.version.label("version")]
    columns += [tables.expires_at.label("expires_at")]
    tried = case((tables.current, meta.updated_by_try)).label("updated_by_try")
    if tables is _TASK:
        return [*columns, tried]
    kind = case((tables.current, meta.updated_by), else_=rows.last_updated_by_kind).label("updated_by")
    task_instance = [rows[f"last_updated_by_{name}"] for name in ("dag_id", "run_id", "task_id", "map_index")]
    return [*columns, kind, *task_instance, tried]


def _entry(scope: StateScope, row: Sequence[Any]) -> StateEntry:
    key, value, updated_at, version, expires_at, *writer = row
    if isinstance(scope, TaskScope):
        return StateEntry(key, value, updated_at, writer[0], version, expires_at)
    return StateEntry(key, value, updated_at, None, version, expires_at, stored_writer(*writer))


@dataclass(frozen=True)
class _Stored:
    """A key as a write finds it, expired or not."""

    value: str
    version: int
    live: bool


def _rowcount(result: Any) -> int:
    """The rows a DELETE removed (its result is a CursorResult)."""
    return int(result.rowcount)


def _session(session: Session | None) -> AbstractContextManager[Session]:
    """The caller's session, or one of our own that commits (an unknown outcome says so)."""
    return committing_session() if session is None else nullcontext(session)


def _upsert(
    db: Session,
    table: Table,
    rows: list[dict[str, Any]],
    unique: Sequence[str],
    replace: Callable[[Any], dict[str, Any]],
) -> Any:
    """INSERT *rows*, or on a conflict of *unique*, SET what *replace* makes of the proposed row."""
    dialect = db.get_bind().dialect.name
    statement: Any
    if dialect == "mysql":
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        statement = mysql_insert(table).values(rows)
        return statement.on_duplicate_key_update(**replace(statement.inserted))
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    else:
        raise NotImplementedError(
            f"the metastore supports PostgreSQL, MySQL/MariaDB and SQLite, not {dialect!r}"
        )
    statement = insert(table).values(rows)
    return statement.on_conflict_do_update(index_elements=list(unique), set_=replace(statement.excluded))


def _fits(db: Session, key: str) -> bool:
    """
    Airflow 3.3 keeps keys in utf8mb3 with a PAD SPACE collation on MySQL: a character outside the
    Basic Multilingual Plane cannot be stored, and ``"key "`` would be the row of ``"key"``.
    """
    if db.get_bind().dialect.name != "mysql":
        return True
    return not key.endswith(" ") and all(ord(character) <= 0xFFFF for character in key)


def _check_keys_fit(db: Session, keys: Iterable[str]) -> None:
    for key in keys:
        if not _fits(db, key):
            raise StateCapabilityError(
                "The metastore on MySQL with Airflow 3.3",
                f"key {key!r:.80}: Airflow 3.3's state store keeps keys as utf8mb3 text, which holds no "
                "character outside the Basic Multilingual Plane (emoji, for one) and ignores trailing spaces",
                "use another key; nothing was written",
            )


class Airflow33MetastoreBackend(BaseStateBackend):
    """State in Airflow 3.3's state store, with versions, expiry and writers kept beside it."""

    supports_versions = True
    supports_expiry = True
    supports_increment = True
    supports_atomic_many = True
    supports_session_transactions = True
    supports_atomic_commit = True

    # --- reads -----------------------------------------------------------------------------

    def _rows(
        self, scope: StateScope, keys: Iterable[str] | None, session: Session | None, *, live: bool = True
    ) -> list[Any]:
        validate_scope(scope)
        tables = _tables(scope)
        query = select(*_entry_columns(tables)).select_from(tables.joined).where(*tables.of_scope(scope))
        if live:
            query = query.where(tables.live(timezone.utcnow()))
        with create_session() if session is None else nullcontext(session) as db:
            if keys is not None:
                storable = [key for key in keys if _fits(db, key)]  # no other is stored
                if not storable:
                    return []
                query = query.where(tables.rows.c.key.in_(storable))
            return list(db.execute(query))

    def get_entry(self, scope: StateScope, key: str, *, session: Any = None) -> StateEntry | None:
        validate_key(key)
        rows = self._rows(scope, [key], session)
        return _entry(scope, rows[0]) if rows else None

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        found = self.get_entry(scope, key, session=session)
        return None if found is None else found.value

    def get_versioned(self, scope: StateScope, key: str, *, session: Any = None) -> VersionedValue | None:
        found = self.get_entry(scope, key, session=session)
        return None if found is None else VersionedValue(found.value, found.version or 0)

    def get_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> dict[str, str]:
        wanted = validate_many_keys(keys, "get_many")
        return {row.key: row.value for row in self._rows(scope, wanted, session)} if wanted else {}

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        return sorted(row.key for row in self._rows(scope, None, session))

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
        every = {row.key: row for row in self._rows(scope, None, session)}
        page, total = page_of_keys(list(every), key_prefix, offset, limit)
        return StateEntryPage([_entry(scope, every[key]) for key in page], total)

    def key_counts(self, scopes: Sequence[StateScope], *, session: Any = None) -> list[int]:
        return [len(self._rows(scope, None, session)) for scope in scopes]

    # --- writes ----------------------------------------------------------------------------

    def _locked(
        self, db: Session, scope: StateScope, keys: Sequence[str]
    ) -> tuple[dict[str, Any], dict[str, _Stored]]:
        """
        The columns that name *scope* in both tables, and what is stored under *keys*, read once
        their meta rows are locked (created, at version 0 and no time, where there were none).
        """
        _check_keys_fit(db, keys)
        tables = _tables(scope)
        if isinstance(scope, TaskScope):
            run = select(DagRun.id).where(DagRun.dag_id == scope.dag_id, DagRun.run_id == scope.run_id)
            parent = {"dag_run_id": db.scalar(run), "task_id": scope.task_id, "map_index": scope.map_index}
            found = parent["dag_run_id"] is not None
        else:
            parent = {"asset_id": scope.asset_id}
            found = db.scalar(select(AssetModel.id).where(AssetModel.id == scope.asset_id)) is not None
        if not found:
            raise missing_parent(scope)
        unique = (*tables.scope_columns, "key")
        placeholders = [{**parent, "key": key, "version": 0} for key in keys]
        db.execute(
            _upsert(db, tables.meta, placeholders, unique, lambda _: {"version": tables.meta.c.version})
        )
        # A new statement after the lock: a write of ours committed meanwhile is read, not missed.
        now = timezone.utcnow()
        stored = {
            row.key: _Stored(row.value, row.version, row.expires_at is None or row.expires_at > now)
            for row in self._rows(scope, keys, db, live=False)
        }
        return parent, stored

    def _store(
        self,
        db: Session,
        scope: StateScope,
        parent: dict[str, Any],
        written: Mapping[str, tuple[str, int]],
        writer: StateWriter | None,
        expires_at: datetime | None,
    ) -> None:
        """Write each key's (value, version) and its meta row, with one time."""
        tables, now = _tables(scope), timezone.utcnow()
        rows = [
            {**parent, "key": key, "value": value, "updated_at": now} for key, (value, _) in written.items()
        ]
        meta: dict[str, Any] = {"updated_by_try": writer.try_number if writer else None, "updated_at": now}
        if isinstance(scope, TaskScope):
            rows = [
                {**row, "dag_id": scope.dag_id, "run_id": scope.run_id, "expires_at": expires_at}
                for row in rows
            ]
        else:
            task_instance = (
                (writer.dag_id, writer.run_id, writer.task_id, writer.map_index) if writer else (None,) * 4
            )
            airflow_writer = {
                "last_updated_by_kind": _AIRFLOW_WRITER_KIND[writer.kind] if writer else None,
                **dict(
                    zip(
                        (
                            "last_updated_by_dag_id",
                            "last_updated_by_run_id",
                            "last_updated_by_task_id",
                            "last_updated_by_map_index",
                        ),
                        task_instance,
                        strict=True,
                    )
                ),
            }
            rows = [{**row, **airflow_writer} for row in rows]
            meta |= {"expires_at": expires_at, "updated_by": writer.kind.value if writer else None}
        unique = (
            ("dag_run_id", "task_id", "map_index", "key")
            if isinstance(scope, TaskScope)
            else ("asset_id", "key")
        )
        replaced = [name for name in rows[0] if name not in unique and name not in ("dag_id", "run_id")]
        db.execute(
            _upsert(
                db, tables.rows, rows, unique, lambda proposed: {name: proposed[name] for name in replaced}
            )
        )
        metas = [{**parent, "key": key, "version": version, **meta} for key, (_, version) in written.items()]
        db.execute(
            _upsert(
                db,
                tables.meta,
                metas,
                (*tables.scope_columns, "key"),
                lambda proposed: {name: proposed[name] for name in ("version", *meta)},
            )
        )

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
        with _session(session) as db:
            parent, stored = self._locked(db, scope, [key])
            found = stored.get(key)
            if if_version is not None:
                visible = found.version if found is not None and found.live else 0
                if visible != if_version:
                    raise StateConflictError(key, if_version, visible)
            version = (found.version if found else 0) + 1
            self._store(db, scope, parent, {key: (value, version)}, writer, expires_at)
            return version

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        self.write(scope, key, value, session=session)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        writer = None
        if try_number is not None and isinstance(scope, TaskScope):
            writer = StateWriter(
                WriterKind.TASK, scope.dag_id, scope.run_id, scope.task_id, scope.map_index, try_number
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
        with _session(session) as db:
            parent, stored = self._locked(db, scope, list(checked))
            written = {
                key: (value, (stored[key].version if key in stored else 0) + 1)
                for key, value in checked.items()
            }
            self._store(db, scope, parent, written, writer, expires_at)
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
        with _session(session) as db:
            parent, stored = self._locked(db, scope, [key])
            found = stored.get(key)
            result = incremented(key, found.value if found and found.live else None, by)
            version = (found.version if found else 0) + 1
            self._store(db, scope, parent, {key: (str(result), version)}, writer, expires_at)
            return result

    def _delete(
        self, scope: StateScope, session: Session | None, keys: list[str] | None = None, **scope_options: Any
    ) -> int:
        """Delete the rows of *keys* (all of the scope's without) and their meta rows; how many rows went."""
        tables = _tables(scope)
        rows_of = tables.of_scope(scope, **scope_options)
        meta_of = [tables.meta.c[name] == tables.rows.c[name] for name in tables.scope_columns]
        if keys is not None:
            rows_of.append(tables.rows.c.key.in_(keys))
        with _session(session) as db:
            # The meta rows first, through the rows that name them: after the rows, nothing would.
            db.execute(
                delete(tables.meta).where(
                    exists().where(*meta_of, tables.meta.c.key == tables.rows.c.key, *rows_of)
                )
            )
            return _rowcount(db.execute(delete(tables.rows).where(*rows_of)))

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
        meta = _TASK.meta.c
        written_by = [
            *(meta[name] == _TASK.rows.c[name] for name in (*_TASK.scope_columns, "key")),
            _TASK.current,
            meta.updated_by_try <= try_number,
        ]
        with _session(session) as db:
            return _rowcount(
                db.execute(delete(_TASK.rows).where(*_TASK.of_scope(scope), exists().where(*written_by)))
            )

    def apply_commit(self, commit: StagedCommit, *, session: Session | None = None) -> bool:
        """The contract's commit, in one transaction: the caller's *session*, else one of its own."""
        with _session(session) as db:
            return super().apply_commit(commit, session=db)

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
        for tables in (_TASK, _ASSET):
            removable = [tables.expires_at.is_not(None), tables.expires_at <= now]
            doomed = and_(*removable)
            if updated_before is not None:
                old = tables.rows.c.updated_at < updated_before
                if tables is _TASK:
                    old = and_(old, tables.rows.c.task_id != COMMIT_RECORDS_TASK_ID)
                doomed = or_(doomed, old)
            for batch in self._batches(tables, doomed, batch_size, dry_run):
                total += batch
        return total

    def _batches(self, tables: _Tables, doomed: Any, batch_size: int, dry_run: bool) -> Iterator[int]:
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
