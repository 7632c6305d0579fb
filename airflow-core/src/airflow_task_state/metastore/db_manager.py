"""Runs our own Alembic chain from `airflow db migrate`, `db reset` and `db check-migrations`."""

from __future__ import annotations

from pathlib import Path

from airflow.utils.db_manager import BaseDBManager
from alembic import command

from airflow_task_state.metastore.models import metadata

_HERE = Path(__file__).parent


class StateDBManager(BaseDBManager):
    """The task_state and asset_state tables, versioned in their own ``alembic_version_state`` table."""

    metadata = metadata
    migration_dir = str(_HERE / "migrations")
    alembic_file = str(_HERE / "migrations" / "alembic.ini")
    version_table_name = "alembic_version_state"
    supports_table_dropping = True
    # airflow-task-state releases and the revision each left the chain at (`--to-version`).
    revision_heads_map = {"0.1.0": "b7d3e1a90112", "0.2.0": "c4a8f2d60113"}

    def downgrade(
        self, to_revision: str, from_revision: str | None = None, show_sql_only: bool = False
    ) -> None:
        """
        Downgrade our tables (``"base"`` drops them), for `airflow state-db downgrade`: `airflow db
        downgrade` does not call external managers.
        """
        self._release_metadata_locks_if_needed()
        config = self.get_alembic_config()
        revision = f"{from_revision}:{to_revision}" if show_sql_only and from_revision else to_revision
        command.downgrade(config, revision=revision, sql=show_sql_only)
