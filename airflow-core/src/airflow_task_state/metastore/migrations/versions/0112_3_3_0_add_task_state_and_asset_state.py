"""
Add task_state and asset_state tables.

Revision ID: b7d3e1a90112
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.models.base import get_id_collation_args
from alembic import op
from sqlalchemy.dialects import mysql

revision = "b7d3e1a90112"
down_revision = None
branch_labels = None
depends_on = None
# The airflow-task-state release that added this revision: the key of StateDBManager.revision_heads_map
# (what `--to-version` means for an external DB manager). The file name's 0112_3_3_0 follows AIP-103's
# migration in Airflow 3.3.0; this chain is our own.
state_version = "0.1.0"

# The column types as they were when this revision was written. Never import them from the models:
# a later change there must not rewrite what this revision creates.
# Keys: exact comparison everywhere; on MySQL/MariaDB their UTF-8 bytes (512 characters, 4 bytes each).
_KEY = sa.String(512).with_variant(mysql.VARBINARY(2048), "mysql")
# Values: TEXT stops at 64 KiB on MySQL.
_VALUE = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql")
# Airflow's UtcDateTime storage: TIMESTAMP WITH TIME ZONE, TIMESTAMP(6) on MySQL.
_TIMESTAMP = sa.TIMESTAMP(timezone=True).with_variant(mysql.TIMESTAMP(fsp=6), "mysql")


def _id() -> sa.String:
    # Airflow's ids, as Airflow's own migrations create them: 250 characters, in the collation the
    # deployment chooses for ids ([database] sql_engine_collation_for_ids; utf8mb3_bin on MySQL).
    return sa.String(250, **get_id_collation_args())


def upgrade() -> None:
    op.create_table(
        "task_state",
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("task_id", _id(), nullable=False),
        sa.Column("map_index", sa.Integer(), server_default=sa.text("-1"), nullable=False),
        sa.Column("key", _KEY, nullable=False),
        sa.Column("dag_id", _id(), nullable=False),
        sa.Column("run_id", _id(), nullable=False),
        sa.Column("value", _VALUE, nullable=False),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
        sa.Column("updated_by_try", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"], ["dag_run.id"], name="task_state_dag_run_id_fkey", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("dag_run_id", "task_id", "map_index", "key", name="task_state_pkey"),
    )
    op.create_index("idx_task_state_lookup", "task_state", ["dag_id", "run_id", "task_id", "map_index"])
    op.create_table(
        "asset_state",
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("key", _KEY, nullable=False),
        sa.Column("value", _VALUE, nullable=False),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["asset.id"], name="asset_state_asset_id_fkey", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("asset_id", "key", name="asset_state_pkey"),
    )


def downgrade() -> None:
    op.drop_table("asset_state")
    op.drop_index("idx_task_state_lookup", table_name="task_state")
    op.drop_table("task_state")
