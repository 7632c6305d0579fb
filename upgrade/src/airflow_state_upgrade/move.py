"""
Copying one of our tables into Airflow 3.3's, in batches of one transaction each.

Rows are read in primary-key order by keyset pagination (each batch starts after the last key of
the one before), so a batch costs the same at the end of a large table as at the start. A batch
the database refuses because of one row's data is retried one row per transaction, so the other
rows still move; any other error stops the command, and running it again continues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from airflow.models.asset import AssetActive, AssetModel
from airflow.models.asset_state_store import AssetStateStoreModel
from airflow.models.task_state_store import TaskStateStoreModel
from sqlalchemy.engine import Connection, Engine, Row

from .encoding import airflow33_value, as_utc, asset_writer, outside_bmp, same_value, text_key
from .records import is_commit_record
from .report import Counts, Report, RowProblem
from .tables import Tables

# Keys per lookup statement: well under every database's limit on bound parameters.
LOOKUP_KEYS = 5000
# MySQL errors that one row's data causes (incorrect string value, data too long), which the
# MySQL drivers raise as OperationalError rather than DataError.
MYSQL_DATA_ERRORS = frozenset({1366, 1406})
UTF8MB3_REFUSAL = (
    "Airflow 3.3 stores keys as utf8mb3 on MySQL/MariaDB, which cannot hold characters "
    "outside the Basic Multilingual Plane (emoji, for one)"
)


@dataclass(frozen=True)
class TableMove:
    """One of our tables and the Airflow 3.3 table its rows go to."""

    name: str
    source: sa.Table
    target: sa.Table
    #: Our primary key (the order rows are read in), and the target's unique key for the same state key.
    key: tuple[str, ...]
    #: The target row (without the value) for one of our rows.
    target_row: Callable[[Row[Any]], dict[str, Any]]

    def scope(self, row: Row[Any]) -> dict[str, Any]:
        return {name: getattr(row, name) for name in self.key if name != "key"}


def _task_row(row: Row[Any]) -> dict[str, Any]:
    columns = ("dag_run_id", "task_id", "map_index", "dag_id", "run_id")
    times = {"updated_at": as_utc(row.updated_at), "expires_at": as_utc(row.expires_at)}
    return {**{name: getattr(row, name) for name in columns}, **times}


def _asset_row(row: Row[Any]) -> dict[str, Any]:
    return {"asset_id": row.asset_id, "updated_at": as_utc(row.updated_at), **asset_writer(row)}


def table_moves(tables: Tables) -> list[TableMove]:
    """The moves of those of our tables that exist (``None`` in *tables*: dropped already)."""
    task_key = ("dag_run_id", "task_id", "map_index", "key")
    moves = (
        ("task_state", tables.task_state, TaskStateStoreModel.__table__, task_key, _task_row),
        ("asset_state", tables.asset_state, AssetStateStoreModel.__table__, ("asset_id", "key"), _asset_row),
    )
    return [
        TableMove(name, source, target, key, row)
        for name, source, target, key, row in moves
        if source is not None
    ]


@dataclass(frozen=True)
class KeyColumn:
    """The target's key column on MySQL/MariaDB, utf8mb3 or not (elsewhere keys compare exactly)."""

    three_byte: bool = False
    collation: str | None = None


@dataclass
class Candidate:
    """A live row of ours on its way: its identity in the target, and the target row."""

    source: Row[Any]
    identity: tuple[Any, ...]
    row: dict[str, Any]


@dataclass
class Plan:
    inserts: list[Candidate] = field(default_factory=list)
    replaces: list[Candidate] = field(default_factory=list)
    unchanged: int = 0
    newer: int = 0
    deleted: int = 0
    conflicts: list[Candidate] = field(default_factory=list)


@dataclass
class Mover:
    engine: Engine
    report: Report
    now: datetime
    batch_size: int
    #: Called after each batch with (table name, rows read so far, rows in the table).
    progress: Callable[[str, int, int], None]
    #: Ids of the assets some DAG uses (asset_active); state of the others is deleted by 3.3.
    active_assets: frozenset[int]
    #: Airflow 3.3's ``[state_store] max_value_storage_bytes`` (0: no limit).
    value_limit: int

    def run(self, move: TableMove) -> None:
        counts = self.report.tables.setdefault(move.name, Counts())
        with self.engine.connect() as connection:
            total = connection.execute(sa.select(sa.func.count()).select_from(move.source)).scalar_one()
        key_column = self._key_column(move.target)
        for rows in self._batches(move):
            counts.read += len(rows)
            candidates = [found for row in rows if (found := self._candidate(move, row, counts, key_column))]
            self._write(move, candidates, counts, key_column)
            self.progress(move.name, counts.read, total)

    # --- reading ---------------------------------------------------------------------------

    def _batches(self, move: TableMove) -> Iterator[Sequence[Row[Any]]]:
        key_columns = [move.source.c[name] for name in move.key]
        query = sa.select(move.source).order_by(*key_columns).limit(self.batch_size)
        after: tuple[Any, ...] | None = None
        while True:
            batch_query = query if after is None else query.where(sa.tuple_(*key_columns) > sa.tuple_(*after))
            with self.engine.connect() as connection:
                rows = connection.execute(batch_query).all()
            if not rows:
                return
            yield rows
            # The raw values (bytes keys on MySQL), so the next comparison is the database's own order.
            after = tuple(getattr(rows[-1], name) for name in move.key)

    def _key_column(self, target: sa.Table) -> KeyColumn:
        """
        How MySQL/MariaDB stores the target's key column: 3.3's migration (unlike its models) sets no
        character set or collation, so the database's defaults apply, perhaps case-insensitive.
        """
        if self.engine.dialect.name != "mysql":
            return KeyColumn()
        query = sa.text(
            "SELECT character_set_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = :table AND column_name = 'key'"
        )
        with self.engine.connect() as connection:
            charset, collation = connection.execute(query, {"table": target.name}).one()
        return KeyColumn(charset.lower() in ("utf8", "utf8mb3"), collation)

    def _candidate(
        self, move: TableMove, row: Row[Any], counts: Counts, key_column: KeyColumn
    ) -> Candidate | None:
        expires_at = as_utc(row.expires_at)
        if expires_at is not None and expires_at <= self.now:
            counts.expired += 1
            return None
        key = text_key(row.key)
        if move.name == "task_state" and is_commit_record(row.task_id, key):
            counts.commit_records += 1
            return None
        if key_column.three_byte and outside_bmp(key):
            self._unmovable(move, row, counts, UTF8MB3_REFUSAL)
            return None
        try:
            value = airflow33_value(row.value)
        except ValueError as error:
            self._unmovable(move, row, counts, f"the stored value is not JSON ({error})")
            return None
        target_row = {**move.target_row(row), "key": key, "value": value}
        identity = tuple(target_row[name] for name in move.key)
        return Candidate(row, identity, target_row)

    def _unmovable(self, move: TableMove, row: Row[Any], counts: Counts, reason: str) -> None:
        counts.unmovable += 1
        problem = RowProblem(move.name, move.scope(row), text_key(row.key), reason)
        self.report.unmovable.append(problem)

    # --- writing ---------------------------------------------------------------------------

    def _write(
        self, move: TableMove, candidates: list[Candidate], counts: Counts, key_column: KeyColumn
    ) -> None:
        if not candidates:
            return
        try:
            with self.engine.begin() as connection:
                plan = self._plan(connection, move, candidates)
                self._apply(connection, move, plan)
        except sa.exc.DBAPIError as error:
            code = getattr(error.orig, "args", (None,))[0] if error.orig is not None else None
            mysql_data_error = self.engine.dialect.name == "mysql" and code in MYSQL_DATA_ERRORS
            if not (isinstance(error, sa.exc.IntegrityError | sa.exc.DataError) or mysql_data_error):
                raise  # not caused by one row's data
            if len(candidates) > 1:  # the batch was rolled back: one transaction per row
                for candidate in candidates:
                    self._write(move, [candidate], counts, key_column)
                return
            reason = f"the database refused it: {str(error.orig).strip().splitlines()[0]}"
            if isinstance(error, sa.exc.IntegrityError) and key_column.collation:
                reason += (
                    f" (Airflow 3.3's key column here has collation {key_column.collation}, under "
                    "which this key equals another one of the same task instance or asset, e.g. "
                    "one differing only in letter case or trailing spaces)"
                )
            self._unmovable(move, candidates[0].source, counts, reason)
            return
        counts.moved += len(plan.inserts)
        counts.unchanged += plan.unchanged
        counts.newer_in_airflow33 += plan.newer
        counts.deleted_in_airflow33 += plan.deleted
        counts.conflicts += len(plan.conflicts)
        counts.overwritten += len(plan.replaces)
        reason = "replaced with ours" if self.report.overwrite else "kept Airflow 3.3's value"
        for candidate in plan.conflicts:
            problem = RowProblem(move.name, move.scope(candidate.source), candidate.row["key"], reason)
            self.report.conflicts.append(problem)
        # Notes about what now lives in Airflow 3.3's store (moved, replaced, or already there).
        for candidate in [*plan.inserts, *plan.replaces]:
            row = candidate.row
            counts.over_value_limit += 0 < self.value_limit < len(row["value"])
            if move.name == "task_state":
                counts.never_expire += row["expires_at"] is None
            else:
                counts.expiry_removed += candidate.source.expires_at is not None
                counts.inactive_asset += row["asset_id"] not in self.active_assets

    def _plan(self, connection: Connection, move: TableMove, candidates: list[Candidate]) -> Plan:
        stored = self._stored_values(connection, move, candidates)
        plan = Plan()
        for candidate in candidates:
            existing = stored.get(candidate.identity)
            if existing is None:
                moved_at = self.report.moved_at
                # The run that completed started at moved_at and moved every live row written
                # before: such a row missing now was deleted in Airflow 3.3. One written since (by a
                # 3.2 process left running) was never moved: it moves now.
                if moved_at is None or candidate.row["updated_at"] > moved_at:
                    plan.inserts.append(candidate)
                else:
                    plan.deleted += 1
            elif same_value(existing.value, candidate.row["value"]):
                plan.unchanged += 1
            elif as_utc(existing.updated_at) > candidate.row["updated_at"]:
                plan.newer += 1  # a 3.3 task wrote it after ours: 3.3's value is the current one
            else:
                plan.conflicts.append(candidate)
                if self.report.overwrite:
                    plan.replaces.append(candidate)
        return plan

    def _stored_values(
        self, connection: Connection, move: TableMove, candidates: list[Candidate]
    ) -> dict[tuple[Any, ...], Any]:
        """
        The target's rows for these candidates' identities, matched exactly in Python, from one range
        scan of its unique key (the batch's scopes, restricted to its keys): per identity or as tuples
        in an IN list is two orders of magnitude slower on PostgreSQL. A row the range misses (the
        target orders scopes by another collation) fails its insert, and the batch is retried row by row.
        """
        scope_columns = sa.tuple_(*(move.target.c[name] for name in move.key[:-1]))
        key_column = move.target.c[move.key[-1]]
        identity_columns = [move.target.c[name] for name in move.key]
        first, last = candidates[0].identity[:-1], candidates[-1].identity[:-1]
        keys = sorted({candidate.identity[-1] for candidate in candidates})
        wanted = {candidate.identity for candidate in candidates}
        stored: dict[tuple[Any, ...], Any] = {}  # identity -> (..., value, updated_at) row
        for start in range(0, len(keys), LOOKUP_KEYS):
            query = sa.select(*identity_columns, move.target.c.value, move.target.c.updated_at).where(
                scope_columns >= sa.tuple_(*first),
                scope_columns <= sa.tuple_(*last),
                key_column.in_(keys[start : start + LOOKUP_KEYS]),
            )
            for row in connection.execute(query):
                identity = tuple(row[: len(identity_columns)])
                if identity in wanted:
                    stored[identity] = row
        return stored

    def _apply(self, connection: Connection, move: TableMove, plan: Plan) -> None:
        if self.report.dry_run:
            return
        if plan.inserts:
            connection.execute(move.target.insert(), [candidate.row for candidate in plan.inserts])
        for candidate in plan.replaces:
            where = [move.target.c[name] == candidate.row[name] for name in move.key]
            changes = {name: value for name, value in candidate.row.items() if name not in move.key}
            connection.execute(move.target.update().where(*where).values(**changes))


def active_asset_ids(engine: Engine) -> frozenset[int]:
    """Assets that some DAG uses: Airflow 3.3 pairs ``asset_active`` with ``asset`` by name and URI."""
    asset, active = AssetModel.__table__, AssetActive.__table__
    query = sa.select(asset.c.id).join(
        active, sa.and_(active.c.name == asset.c.name, active.c.uri == asset.c.uri)
    )
    with engine.connect() as connection:
        return frozenset(connection.execute(query).scalars())
