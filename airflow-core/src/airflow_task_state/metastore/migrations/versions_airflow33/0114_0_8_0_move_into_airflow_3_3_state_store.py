"""
On Airflow 3.3: move task_state and asset_state into Airflow's state store, with their versions,
expiries and writers in task_state_meta and asset_state_meta.

Run by ``airflow db migrate`` after Airflow's own migrations created ``task_state_store`` and
``asset_state_store``, in one transaction: every key moves, or none. Keys already expired are not
carried (no read returns them). A key Airflow's store already holds with the same value (a copy
that airflow-state-upgrade, retired in 0.8, made) counts as moved. A key Airflow's store cannot take
stays where it was, and the log lists it: one Airflow's store holds with another value (Airflow 3.3
wrote it: newer), or, on MySQL, one Airflow's key column cannot hold or does not tell apart from
another (docs/upgrading.md, "What stays behind"). A table that kept nothing is dropped.

The downgrade copies every key of Airflow's store back into the tables of 0113 (created again if
this revision dropped them), with what the meta rows knew, and drops the meta tables: the first
step back to Airflow 3.2. Airflow's store keeps its rows; a later upgrade counts the identical ones
as moved.

Revision ID: e5b1c7f30114
Revises: c4a8f2d60113
Create Date: 2026-12-03
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from airflow.models.base import get_id_collation_args
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import context, op
from sqlalchemy.dialects import mysql, postgresql, sqlite

revision = "e5b1c7f30114"
down_revision = "c4a8f2d60113"
branch_labels = None
depends_on = None
state_version = "0.8.0"

# Named as our package: `airflow db migrate` shows its INFO lines (not those of a module named after a file).
log = logging.getLogger("airflow_task_state.metastore.migrations")

# Frozen column types (never imported from the models), as 0112 and 0113 have them.
_TIMESTAMP = sa.TIMESTAMP(timezone=True).with_variant(mysql.TIMESTAMP(fsp=6), "mysql")
_OUR_KEY = sa.String(512).with_variant(mysql.VARBINARY(2048), "mysql")
_VALUE = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql")
_BATCH = 1000
#: Keys that stay behind, listed one by one in the log (then only counted).
_LISTED = 20
_CANNOT_HOLD = "Airflow's key column on MySQL cannot hold it (a character beyond U+FFFF, or a trailing space)"
_HELD = "Airflow's store already holds this key, or one its key column does not tell apart from it"


def _id() -> sa.String:
    return sa.String(250, **get_id_collation_args())


class _Tables(NamedTuple):
    """A scope type's tables: ours of 3.2, Airflow's store, the meta rows; how Airflow's names a key."""

    ours: sa.Table
    theirs: sa.Table
    meta: sa.Table
    unique: list[str]


def _airflow_key(connection: Any, table: str) -> sa.types.TypeEngine:
    """
    Airflow's key column as this database has it, for the meta rows' key, so both compare keys
    alike: on MySQL its character set and collation, which Airflow 3.3's own migration leaves to the
    database's default (utf8mb4_unicode_ci ignores case) where its models say utf8mb3_bin.
    """
    if connection.dialect.name != "mysql":
        return sa.Table(table, sa.MetaData(), autoload_with=connection).c.key.type
    charset, collation = connection.execute(
        sa.text(
            "SELECT character_set_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = :table AND column_name = 'key'"
        ),
        {"table": table},
    ).one()
    return mysql.VARCHAR(512, charset=charset, collation=collation)


def _create_meta_tables(connection: Any, existing: set[str]) -> None:
    # On MySQL a CREATE TABLE commits: a run that failed after it left these, empty.
    if "task_state_meta" not in existing:
        op.create_table(
            "task_state_meta",
            sa.Column("dag_run_id", sa.Integer(), nullable=False),
            sa.Column("task_id", _id(), nullable=False),
            sa.Column("map_index", sa.Integer(), nullable=False),
            sa.Column("key", _airflow_key(connection, "task_state_store"), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("updated_by_try", sa.Integer(), nullable=True),
            sa.Column("updated_at", _TIMESTAMP, nullable=True),
            sa.ForeignKeyConstraint(
                ["dag_run_id"], ["dag_run.id"], name="task_state_meta_dag_run_id_fkey", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("dag_run_id", "task_id", "map_index", "key", name="task_state_meta_pkey"),
        )
    if "asset_state_meta" not in existing:
        op.create_table(
            "asset_state_meta",
            sa.Column("asset_id", sa.Integer(), nullable=False),
            sa.Column("key", _airflow_key(connection, "asset_state_store"), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("expires_at", _TIMESTAMP, nullable=True),
            sa.Column("updated_by", sa.String(16), nullable=True),
            sa.Column("updated_by_try", sa.Integer(), nullable=True),
            sa.Column("updated_at", _TIMESTAMP, nullable=True),
            sa.ForeignKeyConstraint(
                ["asset_id"], ["asset.id"], name="asset_state_meta_asset_id_fkey", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("asset_id", "key", name="asset_state_meta_pkey"),
        )
        op.create_index("idx_asset_state_meta_expires_at", "asset_state_meta", ["expires_at"])


def _task_rows(row: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    names = ("dag_run_id", "task_id", "map_index", "key")
    scope = {name: row[name] for name in names}
    stored = {**scope, "dag_id": row["dag_id"], "run_id": row["run_id"], "value": row["value"]}
    stored |= {"updated_at": row["updated_at"], "expires_at": row["expires_at"]}
    meta = {**scope, "version": row["version"], "updated_by_try": row["updated_by_try"]}
    return stored, {**meta, "updated_at": row["updated_at"]}


def _asset_rows(row: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    scope = {"asset_id": row["asset_id"], "key": row["key"]}
    writer = row["updated_by"]
    stored = {**scope, "value": row["value"], "updated_at": row["updated_at"]}
    # Airflow's asset rows know the kinds its own API knows: a write from our CLI is one of an API.
    stored["last_updated_by_kind"] = "api" if writer == "cli" else writer
    for field in ("dag_id", "run_id", "task_id", "map_index"):
        stored[f"last_updated_by_{field}"] = row[f"updated_by_{field}"] if writer == "task" else None
    meta = {**scope, "version": row["version"], "expires_at": row["expires_at"], "updated_by": writer}
    return stored, {**meta, "updated_by_try": row["updated_by_try"], "updated_at": row["updated_at"]}


def _text(key: Any) -> str:
    # MySQL kept our keys as their UTF-8 bytes.
    return key.decode("utf-8") if isinstance(key, bytes) else key


def _storable(key: str, on_mysql: bool) -> bool:
    # The keys the metastore refuses on Airflow 3.3's MySQL key column (beside_airflow33.backend).
    return not on_mysql or (not key.endswith(" ") and all(ord(character) <= 0xFFFF for character in key))


def _batches(connection: Any, table: sa.Table, key_columns: list[str]) -> Iterator[list[Any]]:
    """The rows of *table* in primary-key order, a batch at a time (keyset pagination)."""
    order = [table.c[name] for name in key_columns]
    last: tuple[Any, ...] | None = None
    while True:
        query = sa.select(table).order_by(*order).limit(_BATCH)
        if last is not None:
            query = query.where(sa.tuple_(*order) > sa.tuple_(*last))
        rows = [row._mapping for row in connection.execute(query)]
        if not rows:
            return
        yield rows
        last = tuple(rows[-1][name] for name in key_columns)


def _insert_unless_held(connection: Any, table: sa.Table) -> Any:
    """An INSERT into *table* that skips a row whose key the table already holds (as it compares keys)."""
    dialect = connection.dialect.name
    if dialect == "mysql":
        return table.insert().prefix_with("IGNORE")
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing()


def _holds(theirs_value: str | None, ours: str) -> bool:
    """
    Whether Airflow's row holds our value: the same text, or the same JSON (the copies that
    airflow-state-upgrade, retired in 0.8, made re-encoded it).
    """
    if theirs_value is None or theirs_value == ours:
        return theirs_value is not None
    try:
        return json.loads(theirs_value) == json.loads(ours)
    except ValueError:
        return False


def _move_batch(connection: Any, tables: _Tables, rows: list[Any], converted: Callable) -> tuple[int, list]:
    """Move one batch of our rows: (how many moved, what stayed and why)."""
    ours, theirs, meta, unique = tables
    on_mysql = connection.dialect.name == "mysql"
    candidates, stayed = [], []
    for row in rows:
        stored, meta_row = converted({**row, "key": _text(row["key"])})
        if _storable(stored["key"], on_mysql):
            candidates.append((row, stored, meta_row))
        else:
            stayed.append((stored, _CANNOT_HOLD))
    if not candidates:
        return 0, stayed
    connection.execute(_insert_unless_held(connection, theirs), [stored for _, stored, _ in candidates])
    # What Airflow's store now holds under these keys, as its key column compares them; a row of ours
    # moved if that is its very key, time and value (which it is, unless the key was held before).
    named = [*unique, "updated_at"]
    wanted = sa.tuple_(*(theirs.c[column] for column in unique)).in_(
        [tuple(stored[column] for column in unique) for _, stored, _ in candidates]
    )
    found = sa.select(*(theirs.c[column] for column in named), theirs.c.value).where(wanted)
    held = {tuple(row[:-1]): row[-1] for row in connection.execute(found)}
    landed = []
    for row, stored, meta_row in candidates:
        if _holds(held.get(tuple(stored[column] for column in named)), stored["value"]):
            landed.append((row, meta_row))
        else:
            stayed.append((stored, _HELD))
    if landed:
        connection.execute(meta.insert(), [meta_row for _, meta_row in landed])
        primary = [column.name for column in ours.primary_key]
        ours_key = sa.tuple_(*(ours.c[column] for column in primary))
        moved_keys = [tuple(row[column] for column in primary) for row, _ in landed]
        connection.execute(ours.delete().where(ours_key.in_(moved_keys)))
    return len(landed), stayed


def _move(
    connection: Any, name: str, converted: Callable[[Any], tuple[dict, dict]], unique: list[str]
) -> tuple[int, int, list[tuple[dict, str]]]:
    """Move what Airflow's store can take out of our table *name*: (moved, expired, what stayed and why)."""
    ours, theirs, meta = (
        sa.Table(table, sa.MetaData(), autoload_with=connection)
        for table in (name, f"{name}_store", f"{name}_meta")
    )
    tables = _Tables(ours, theirs, meta, unique)
    now = sa.bindparam("now", datetime.now(UTC), type_=UtcDateTime())
    expired = connection.execute(ours.delete().where(ours.c.expires_at <= now)).rowcount
    moved, stayed = 0, []  # type: tuple[int, list[tuple[dict, str]]]
    for rows in _batches(connection, ours, [column.name for column in ours.primary_key]):
        moved_now, stayed_now = _move_batch(connection, tables, rows, converted)
        moved, stayed = moved + moved_now, stayed + stayed_now
    return moved, expired, stayed


def _named(stored: dict[str, Any]) -> str:
    if "asset_id" in stored:
        return f"asset {stored['asset_id']}, key {stored['key']!r}"
    where = f"{stored['dag_id']} / {stored['run_id']} / {stored['task_id']} [{stored['map_index']}]"
    return f"{where}, key {stored['key']!r}"


def _report(name: str, moved: int, expired: int, stayed: list[tuple[dict, str]]) -> None:
    log.info("%s: %d key(s) moved into %s_store, %d expired key(s) not carried", name, moved, name, expired)
    if not stayed:
        return
    log.warning(
        "%s: %d key(s) stayed in table %s (nothing is lost): Airflow's state store cannot take them. "
        "See 'What stays behind' in airflow-task-state's docs/upgrading.md. They are:",
        name,
        len(stayed),
        name,
    )
    for stored, reason in stayed[:_LISTED]:
        log.warning("  %s: %s", _named(stored), reason)
    if len(stayed) > _LISTED:
        log.warning("  ... and %d more: SELECT * FROM %s lists them all", len(stayed) - _LISTED, name)


def _refuse_offline() -> None:
    if context.is_offline_mode():
        raise RuntimeError(
            "revision e5b1c7f30114 moves rows between tables: it needs the database and cannot be shown "
            "as SQL (--show-sql-only); run it without"
        )


def upgrade() -> None:
    _refuse_offline()
    connection = op.get_bind()
    existing = set(sa.inspect(connection).get_table_names())
    _create_meta_tables(connection, existing)
    moves = (
        ("task_state", _task_rows, ["dag_run_id", "task_id", "map_index", "key"]),
        ("asset_state", _asset_rows, ["asset_id", "key"]),
    )
    # The record airflow-state-upgrade (retired in 0.8) kept of a move it made: nothing reads it now.
    emptied = ["airflow_state_upgrade"] if "airflow_state_upgrade" in existing else []
    for name, converted, unique in moves:
        if name in existing:
            moved, expired, stayed = _move(connection, name, converted, unique)
            _report(name, moved, expired, stayed)
            if not stayed:
                emptied.append(name)
    # Last: on MySQL a DROP TABLE commits.
    for name in emptied:
        op.drop_table(name)


# --- the way back ---------------------------------------------------------------------------------


def _create_old_tables(existing: set[str]) -> None:
    """The tables as 0113 left them, where this revision dropped them."""
    if "task_state" not in existing:
        op.create_table(
            "task_state",
            sa.Column("dag_run_id", sa.Integer(), nullable=False),
            sa.Column("task_id", _id(), nullable=False),
            sa.Column("map_index", sa.Integer(), server_default=sa.text("-1"), nullable=False),
            sa.Column("key", _OUR_KEY, nullable=False),
            sa.Column("dag_id", _id(), nullable=False),
            sa.Column("run_id", _id(), nullable=False),
            sa.Column("value", _VALUE, nullable=False),
            sa.Column("updated_at", _TIMESTAMP, nullable=False),
            sa.Column("updated_by_try", sa.Integer(), nullable=True),
            sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
            sa.Column("expires_at", _TIMESTAMP, nullable=True),
            sa.ForeignKeyConstraint(
                ["dag_run_id"], ["dag_run.id"], name="task_state_dag_run_id_fkey", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("dag_run_id", "task_id", "map_index", "key", name="task_state_pkey"),
        )
        op.create_index("idx_task_state_lookup", "task_state", ["dag_id", "run_id", "task_id", "map_index"])
        op.create_index("idx_task_state_expires_at", "task_state", ["expires_at"])
    if "asset_state" not in existing:
        op.create_table(
            "asset_state",
            sa.Column("asset_id", sa.Integer(), nullable=False),
            sa.Column("key", _OUR_KEY, nullable=False),
            sa.Column("value", _VALUE, nullable=False),
            sa.Column("updated_at", _TIMESTAMP, nullable=False),
            sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
            sa.Column("expires_at", _TIMESTAMP, nullable=True),
            sa.Column("updated_by", sa.String(16), nullable=True),
            sa.Column("updated_by_dag_id", _id(), nullable=True),
            sa.Column("updated_by_run_id", _id(), nullable=True),
            sa.Column("updated_by_task_id", _id(), nullable=True),
            sa.Column("updated_by_map_index", sa.Integer(), nullable=True),
            sa.Column("updated_by_try", sa.Integer(), nullable=True),
            sa.ForeignKeyConstraint(
                ["asset_id"], ["asset.id"], name="asset_state_asset_id_fkey", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("asset_id", "key", name="asset_state_pkey"),
        )
        op.create_index("idx_asset_state_expires_at", "asset_state", ["expires_at"])


def _copy_back(connection: Any, name: str, scope: list[str]) -> None:
    """Every key of Airflow's store into our table *name*, in one INSERT ... SELECT, replacing ours."""
    ours = sa.Table(name, sa.MetaData(), autoload_with=connection)
    rows = sa.Table(f"{name}_store", sa.MetaData(), autoload_with=connection)
    meta = sa.Table(f"{name}_meta", sa.MetaData(), autoload_with=connection)
    same_key = [meta.c[column] == rows.c[column] for column in (*scope, "key")]
    # The meta row describes the row's value only if Airflow's own writers have not changed it since.
    current = meta.c.updated_at == rows.c.updated_at
    copied: dict[str, Any] = {column: rows.c[column] for column in (*scope, "key", "value", "updated_at")}
    copied["version"] = sa.case((current, meta.c.version), else_=sa.func.coalesce(meta.c.version, 0) + 1)
    copied["updated_by_try"] = sa.case((current, meta.c.updated_by_try))
    if name == "task_state":
        copied |= {column: rows.c[column] for column in ("dag_id", "run_id", "expires_at")}
    else:
        copied["expires_at"] = sa.case((current, meta.c.expires_at))
        copied["updated_by"] = sa.case((current, meta.c.updated_by), else_=rows.c.last_updated_by_kind)
        for field in ("dag_id", "run_id", "task_id", "map_index"):
            copied[f"updated_by_{field}"] = rows.c[f"last_updated_by_{field}"]
    # A key of ours that stayed behind where Airflow's store holds the very same key: its value is newer.
    connection.execute(
        ours.delete().where(
            sa.exists().where(*(rows.c[column] == ours.c[column] for column in (*scope, "key")))
        )
    )
    selected = sa.select(*copied.values()).select_from(rows.outerjoin(meta, sa.and_(*same_key)))
    connection.execute(ours.insert().from_select(list(copied), selected))


def downgrade() -> None:
    _refuse_offline()
    connection = op.get_bind()
    _create_old_tables(set(sa.inspect(connection).get_table_names()))
    _copy_back(connection, "task_state", ["dag_run_id", "task_id", "map_index"])
    _copy_back(connection, "asset_state", ["asset_id"])
    op.drop_index("idx_asset_state_meta_expires_at", table_name="asset_state_meta")
    op.drop_table("asset_state_meta")
    op.drop_table("task_state_meta")
