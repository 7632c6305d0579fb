"""
On Airflow 3.3: move task_state and asset_state into Airflow's state store, with their versions,
expiries and writers in task_state_meta and asset_state_meta.

Run by ``airflow db migrate`` after Airflow's own migrations (which created ``task_state_store`` and
``asset_state_store``), in one transaction: every key moves, or none. A key Airflow's store cannot
take stays where it was, and is reported: one Airflow's store already holds (Airflow 3.3 wrote it,
so it is newer), or, on MySQL, one Airflow's utf8mb3 key column cannot hold or tell apart from
another. A table that kept nothing is dropped.

Revision ID: e5b1c7f30114
Revises: c4a8f2d60113
Create Date: 2026-12-03
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from airflow.models.base import get_id_collation_args
from alembic import op
from sqlalchemy.dialects import mysql

revision = "e5b1c7f30114"
down_revision = "c4a8f2d60113"
branch_labels = None
depends_on = None
state_version = "0.8.0"

log = logging.getLogger(__name__)

# Frozen column types (never imported from the models). Keys as Airflow 3.3's key column has them.
_TIMESTAMP = sa.TIMESTAMP(timezone=True).with_variant(mysql.TIMESTAMP(fsp=6), "mysql")
_BATCH = 1000


def _key() -> sa.String:
    return sa.String(512, **get_id_collation_args())


def _id() -> sa.String:
    return sa.String(250, **get_id_collation_args())


def _create_meta_tables() -> None:
    op.create_table(
        "task_state_meta",
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("task_id", _id(), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("key", _key(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_by_try", sa.Integer(), nullable=True),
        sa.Column("updated_at", _TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"], ["dag_run.id"], name="task_state_meta_dag_run_id_fkey", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("dag_run_id", "task_id", "map_index", "key", name="task_state_meta_pkey"),
    )
    op.create_table(
        "asset_state_meta",
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("key", _key(), nullable=False),
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


def _move(connection: Any, name: str, converted: Any, unique: list[str]) -> int:
    """Move what Airflow's store can take from our table *name*; return how many keys stayed."""
    ours = sa.Table(name, sa.MetaData(), autoload_with=connection)
    theirs = sa.Table(f"{name}_store", sa.MetaData(), autoload_with=connection)
    meta = sa.Table(f"{name}_meta", sa.MetaData(), autoload_with=connection)
    on_mysql = connection.dialect.name == "mysql"
    primary = [column.name for column in ours.primary_key]
    stayed = 0
    their_key = sa.tuple_(*(theirs.c[column] for column in unique))
    for rows in _batches(connection, ours, primary):
        candidates = []
        for row in rows:
            stored, meta_row = converted({**row, "key": _text(row["key"])})
            if _storable(stored["key"], on_mysql):
                candidates.append((row, stored, meta_row))
        wanted = [tuple(stored[column] for column in unique) for _, stored, _ in candidates]
        # Keys Airflow 3.3 wrote since (in a deployment that ran it before this migration): newer.
        taken = (
            set(connection.execute(sa.select(*their_key.clauses).where(their_key.in_(wanted))))
            if wanted
            else set()
        )
        moving = [
            (stored, meta_row)
            for _, stored, meta_row in candidates
            if tuple(stored[c] for c in unique) not in taken
        ]
        moved_keys = [
            tuple(row[c] for c in primary)
            for row, stored, _ in candidates
            if tuple(stored[c] for c in unique) not in taken
        ]
        stayed += len(rows) - len(moving)
        if moving:
            connection.execute(theirs.insert(), [stored for stored, _ in moving])
            connection.execute(meta.insert(), [meta_row for _, meta_row in moving])
            moved = sa.tuple_(*(ours.c[column] for column in primary)).in_(moved_keys)
            connection.execute(ours.delete().where(moved))
    return stayed


def upgrade() -> None:
    _create_meta_tables()
    connection = op.get_bind()
    existing = set(sa.inspect(connection).get_table_names())
    moves = (
        ("task_state", _task_rows, ["dag_run_id", "task_id", "map_index", "key"]),
        ("asset_state", _asset_rows, ["asset_id", "key"]),
    )
    for name, converted, unique in moves:
        if name not in existing:
            continue
        stayed = _move(connection, name, converted, unique)
        if stayed:
            log.warning(
                "%d key(s) of %s stayed there: Airflow 3.3's state store holds a newer value for each, "
                "or (on MySQL) cannot hold its key. Nothing was lost; see docs/upgrading.md, "
                "'What stays behind'.",
                stayed,
                name,
            )
        else:
            op.drop_table(name)


def downgrade() -> None:
    # The values stay in Airflow's store: only what it lacks (versions, writers) goes.
    op.drop_index("idx_asset_state_meta_expires_at", table_name="asset_state_meta")
    op.drop_table("asset_state_meta")
    op.drop_table("task_state_meta")
