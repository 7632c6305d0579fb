from __future__ import annotations

from typing import Any

from airflow import settings
from airflow_task_state.metastore.db_manager import StateDBManager
from alembic import context

metadata = StateDBManager.metadata


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    # The database also holds Airflow's own tables: only ours are this chain's business.
    if type_ == "table":
        return name in {table.name for table in metadata.tables.values()}
    return True


# What both modes configure.
OPTIONS: dict[str, Any] = {
    "target_metadata": metadata,
    "version_table": StateDBManager.version_table_name,
    "include_object": include_object,
    "render_as_batch": True,
}


def run_migrations_offline() -> None:
    context.configure(
        url=settings.SQL_ALCHEMY_CONN, literal_binds=True, dialect_opts={"paramstyle": "named"}, **OPTIONS
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = context.config.attributes.get("connection") or settings.engine
    if connectable is None:
        raise RuntimeError("Airflow's database engine is not configured: check [database] sql_alchemy_conn")
    with connectable.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True, **OPTIONS)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
