"""
Add version and expires_at to task_state and asset_state, and the last writer to asset_state.

Revision ID: c4a8f2d60113
Revises: b7d3e1a90112
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.models.base import get_id_collation_args
from alembic import op
from sqlalchemy.dialects import mysql

revision = "c4a8f2d60113"
down_revision = "b7d3e1a90112"
branch_labels = None
depends_on = None
# The airflow-task-state release that added this revision (a key of StateDBManager.revision_heads_map).
state_version = "0.2.0"

# Frozen column types, as in 0112: never imported from the models.
# Airflow's UtcDateTime storage: TIMESTAMP WITH TIME ZONE, TIMESTAMP(6) on MySQL.
_TIMESTAMP = sa.TIMESTAMP(timezone=True).with_variant(mysql.TIMESTAMP(fsp=6), "mysql")
# Who wrote asset state: "task", "api" or "cli".
_WRITER_KIND = sa.String(16)


def _id() -> sa.String:
    # Airflow's ids: 250 characters, in the deployment's collation for ids (as 0112).
    return sa.String(250, **get_id_collation_args())


def _version_and_expiry() -> list[sa.Column]:
    # Existing keys get version 1 (the server default fills them) and never expire (NULL).
    return [
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("expires_at", _TIMESTAMP, nullable=True),
    ]


def _altering(table: str):
    # Batch mode, but never "move and copy": every change here is one SQLite can make in place
    # (ADD COLUMN; DROP COLUMN of an unindexed column, SQLite 3.35+), and copying would need the
    # live table to reflect, which `--show-sql-only` does not have. Elsewhere it is ALTER TABLE.
    return op.batch_alter_table(table, recreate="never")


def upgrade() -> None:
    with _altering("task_state") as batch:
        for column in _version_and_expiry():
            batch.add_column(column)
        batch.create_index("idx_task_state_expires_at", ["expires_at"])
    with _altering("asset_state") as batch:
        for column in _version_and_expiry():
            batch.add_column(column)
        batch.add_column(sa.Column("updated_by", _WRITER_KIND, nullable=True))
        batch.add_column(sa.Column("updated_by_dag_id", _id(), nullable=True))
        batch.add_column(sa.Column("updated_by_run_id", _id(), nullable=True))
        batch.add_column(sa.Column("updated_by_task_id", _id(), nullable=True))
        batch.add_column(sa.Column("updated_by_map_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("updated_by_try", sa.Integer(), nullable=True))
        batch.create_index("idx_asset_state_expires_at", ["expires_at"])


def downgrade() -> None:
    with _altering("asset_state") as batch:
        batch.drop_index("idx_asset_state_expires_at")
        for name in (
            "updated_by_try",
            "updated_by_map_index",
            "updated_by_task_id",
            "updated_by_run_id",
            "updated_by_dag_id",
            "updated_by",
            "expires_at",
            "version",
        ):
            batch.drop_column(name)
    with _altering("task_state") as batch:
        batch.drop_index("idx_task_state_expires_at")
        batch.drop_column("expires_at")
        batch.drop_column("version")
