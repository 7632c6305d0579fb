"""Runs our own Alembic chain from `airflow db migrate`, `db reset` and `db check-migrations`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.utils.db_manager import BaseDBManager
from alembic import command

from airflow_task_state.airflow_line import MIGRATION_RELEASES, MIGRATION_VERSION_FOLDERS
from airflow_task_state.metastore import state_tables

_HERE = Path(__file__).parent


class StateDBManager(BaseDBManager):
    """This package's tables on this Airflow, versioned in their own ``alembic_version_state`` table."""

    metadata = state_tables()
    migration_dir = str(_HERE / "migrations")
    alembic_file = str(_HERE / "migrations" / "alembic.ini")
    version_table_name = "alembic_version_state"
    supports_table_dropping = True
    # airflow-task-state releases and the revision each left the chain at (`--to-version`).
    revision_heads_map = MIGRATION_RELEASES

    def get_alembic_config(self) -> Any:
        config = super().get_alembic_config()
        folders = (_HERE / "migrations" / folder for folder in MIGRATION_VERSION_FOLDERS)
        config.set_main_option("version_locations", " ".join(str(folder) for folder in folders))
        return config

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
