from __future__ import annotations

from airflow import settings
from airflow.state.metastore.db_manager import StateDBManager
from airflow.state.metastore.models import metadata
from alembic import context

VERSION_TABLE = StateDBManager.version_table_name


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    # The database also holds Airflow's own tables: only ours are this chain's business.
    if type_ == "table":
        return name in {table.name for table in metadata.tables.values()}
    return True


def run_migrations_offline() -> None:
    context.configure(
        url=settings.SQL_ALCHEMY_CONN,
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        version_table=VERSION_TABLE,
        include_object=include_object,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = context.config.attributes.get("connection") or settings.engine
    if connectable is None:
        raise RuntimeError("Airflow's database engine is not configured: check [database] sql_alchemy_conn")
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=VERSION_TABLE,
            include_object=include_object,
            render_as_batch=True,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
