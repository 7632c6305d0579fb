"""
Add task_state and asset_state tables.

Revision ID: b7d3e1a90112
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.models.base import StringID
from airflow.state.metastore.models.types import StateKey, StateValue
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "b7d3e1a90112"
down_revision = None
branch_labels = None
depends_on = None
# Named after AIP-103's migration 0112 in Airflow 3.3.0; this chain is our own.
airflow_version = "3.3.0"


def upgrade() -> None:
    op.create_table(
        "task_state",
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("task_id", StringID(), nullable=False),
        sa.Column("map_index", sa.Integer(), server_default=sa.text("-1"), nullable=False),
        sa.Column("key", StateKey(), nullable=False),
        sa.Column("dag_id", StringID(), nullable=False),
        sa.Column("run_id", StringID(), nullable=False),
        sa.Column("value", StateValue, nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
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
        sa.Column("key", StateKey(), nullable=False),
        sa.Column("value", StateValue, nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["asset.id"], name="asset_state_asset_id_fkey", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("asset_id", "key", name="asset_state_pkey"),
    )


def downgrade() -> None:
    op.drop_table("asset_state")
    op.drop_index("idx_task_state_lookup", table_name="task_state")
    op.drop_table("task_state")
