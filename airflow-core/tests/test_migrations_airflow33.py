"""
The revision Airflow 3.3 adds to our chain (0114: the meta tables, and the move out of 3.2's tables)
builds what the ORM models of ``metastore/beside_airflow33`` describe: compiled for every dialect, and
run for real by ``airflow db migrate --use-migration-files`` on the database of the run. Runs on
Airflow 3.3 only (``airflow33().python -m pytest ...``); tests/test_upgrade_to_airflow33.py moves real
state through it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from state_testing.airflow_cli import run_airflow
from state_testing.schema import table_ddl

pytestmark = pytest.mark.only_airflow33  # revision 0114 belongs to Airflow 3.3

META_TABLES = {"task_state_meta", "asset_state_meta"}
MIGRATION = (
    Path(__file__).parents[1]
    / "src/airflow_task_state/metastore/migrations/versions_airflow33"
    / "0114_0_8_0_move_into_airflow_3_3_state_store.py"
)


def _migration_tables() -> sa.MetaData:
    """The meta tables 0114 creates (its own column types) where Airflow built its tables from its models."""
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.models.task_state_store import TaskStateStoreModel

    tables = sa.MetaData()
    for referenced in ("dag_run", "asset"):
        sa.Table(referenced, tables, sa.Column("id", sa.Integer, primary_key=True))

    class RecordingOp:
        def create_table(self, name, *columns):
            sa.Table(name, tables, *columns)

        def create_index(self, name, table, columns):
            sa.Index(name, *(tables.tables[table].c[column] for column in columns))

    spec = importlib.util.spec_from_file_location("migration_0114", MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.op = RecordingOp()
    # The key column as Airflow's own models create it (its migration leaves it to the database).
    airflows = {"task_state_store": TaskStateStoreModel, "asset_state_store": AssetStateStoreModel}
    module._airflow_key = lambda connection, table: airflows[table].__table__.c.key.type
    module._create_meta_tables(SimpleNamespace(), existing=set())
    return tables


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql", "mysql"])
def test_0114_and_the_models_emit_the_same_ddl(dialect_name):
    from airflow_task_state.metastore.beside_airflow33.models import metadata

    migration = _migration_tables()
    for name in META_TABLES:
        assert table_ddl(migration, name, dialect_name) == table_ddl(metadata, name, dialect_name)


def test_the_chain_run_by_its_files_builds_the_models_tables():
    """0112, 0113 (our 3.2 tables), then 0114, which moves their nothing and drops them."""
    from airflow import settings
    from airflow_task_state.metastore.beside_airflow33.models import metadata
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    run_airflow("state-db", "downgrade", "--to-revision", "base", "--yes")
    run_airflow("db", "migrate", "--use-migration-files")
    run_airflow("db", "check-migrations", "--migration-wait-timeout", "5")

    def ours(obj, name, type_, reflected, compare_to):
        return type_ != "table" or name in META_TABLES

    with settings.engine.connect() as connection:
        tables = set(sa.inspect(connection).get_table_names())
        context = MigrationContext.configure(
            connection, opts={"include_object": ours, "compare_type": True, "compare_server_default": True}
        )
        assert compare_metadata(context, metadata) == []
    assert tables >= META_TABLES
    assert not tables & {"task_state", "asset_state"}
