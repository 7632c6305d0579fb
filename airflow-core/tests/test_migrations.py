"""The 0112 chain, run by real `airflow` commands on the database of the run."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from airflow_shared.state import TaskScope
from sqlalchemy import inspect, select, text
from state_testing.airflow_cli import run_airflow

STATE_TABLES = {"task_state", "asset_state"}
HEAD = "b7d3e1a90112"
MIGRATION = (
    Path(__file__).parents[1]
    / "src/airflow/state/metastore/migrations/versions/0112_3_3_0_add_task_state_and_asset_state.py"
)


def table_names() -> set[str]:
    from airflow import settings

    with settings.engine.connect() as conn:
        return set(inspect(conn).get_table_names())


def state_revision() -> str | None:
    from airflow import settings

    with settings.engine.connect() as conn:
        if "alembic_version_state" not in inspect(conn).get_table_names():
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version_state")).scalar()


def schema_differences() -> list:
    """What Alembic sees between the live tables and the ORM models (our tables only)."""
    from airflow import settings
    from airflow.state.metastore.models import metadata
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    def ours(obj, name, type_, reflected, compare_to):
        return type_ != "table" or name in STATE_TABLES

    with settings.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_object": ours, "compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(context, metadata)


def test_chain_has_one_head_the_0112_revision():
    from airflow.state.metastore.db_manager import StateDBManager
    from airflow.utils.session import create_session

    with create_session() as session:
        script = StateDBManager(session).get_script_object()
    assert script.get_heads() == [HEAD]
    (revision,) = script.walk_revisions()
    assert Path(revision.path).name == "0112_3_3_0_add_task_state_and_asset_state.py"
    assert revision.down_revision is None
    # The version a revision names is an airflow-task-state release, as revision_heads_map's keys.
    assert StateDBManager.revision_heads_map == {revision.module.state_version: HEAD}


def test_the_migration_imports_no_model():
    """History stays put: changing a model later must not change what revision 0112 creates."""
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('migration_0112', {str(MIGRATION)!r}); "
        "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
        "print(sorted(m for m in sys.modules if m.startswith('airflow.state.metastore.models')))"
    )
    # (Importing Airflow loads our provider info, so airflow.state itself is there anyway.)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(MIGRATION.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not {name for name in imported if name and name.startswith("airflow.state")}


def _migration_tables() -> sa.MetaData:
    """The tables revision 0112 creates, built from its own column types without a database."""
    spec = importlib.util.spec_from_file_location("migration_0112", MIGRATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tables = sa.MetaData()
    for referenced in ("dag_run", "asset"):
        sa.Table(referenced, tables, sa.Column("id", sa.Integer, primary_key=True))

    class RecordingOp:
        def create_table(self, name, *columns):
            sa.Table(name, tables, *columns)

        def create_index(self, name, table, columns):
            sa.Index(name, *(tables.tables[table].c[column] for column in columns))

    module.op = RecordingOp()
    module.upgrade()
    return tables


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql", "mysql"])
def test_migration_and_models_emit_the_same_ddl(dialect_name):
    from airflow.state.metastore.models import metadata
    from sqlalchemy.dialects import registry
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = registry.load(dialect_name)()
    migration = _migration_tables()

    def ddl(tables, name):
        table = tables.tables[name]
        indexes = sorted(str(CreateIndex(index).compile(dialect=dialect)) for index in table.indexes)
        return [str(CreateTable(table).compile(dialect=dialect)), *indexes]

    for name in STATE_TABLES:
        assert ddl(migration, name) == ddl(metadata, name)


def test_migration_files_and_orm_build_the_same_schema():
    # Built from the ORM (what `airflow db migrate` does on a fresh database) ...
    run_airflow("state-db", "downgrade", "--to-revision", "base", "--yes")
    run_airflow("db", "migrate")
    assert table_names() >= STATE_TABLES
    assert schema_differences() == []
    # ... and by running the migration file itself.
    run_airflow("state-db", "downgrade", "--to-revision", "base", "--yes")
    run_airflow("db", "migrate", "--use-migration-files")
    assert state_revision() == HEAD
    assert schema_differences() == []


def test_upgrade_downgrade_upgrade(backend, make_dag_run, unique):
    make_dag_run(f"dag_{unique}", "run")
    scope = TaskScope(f"dag_{unique}", "run", "task")
    backend.set(scope, "k", "survives re-running migrate")
    run_airflow("db", "migrate")
    assert backend.get(scope, "k") == "survives re-running migrate"
    run_airflow("db", "check-migrations", "--migration-wait-timeout", "5")

    run_airflow("state-db", "downgrade", "--to-revision", "base", "--yes")
    assert not STATE_TABLES & table_names()
    assert state_revision() is None
    not_migrated = run_airflow("db", "check-migrations", "--migration-wait-timeout", "1", check=False)
    assert not_migrated.returncode != 0

    run_airflow("db", "migrate", "--use-migration-files")
    assert table_names() >= STATE_TABLES
    assert state_revision() == HEAD
    run_airflow("db", "check-migrations", "--migration-wait-timeout", "5")
    assert backend.get(scope, "k") is None
    backend.set(scope, "k", "works again")
    assert backend.get(scope, "k") == "works again"


def test_downgrade_show_sql_only_prints_and_changes_nothing():
    result = run_airflow(
        "state-db", "downgrade", "--to-revision", "base", "--from-revision", HEAD, "--show-sql-only"
    )
    assert "DROP TABLE asset_state" in result.stdout
    assert "DROP TABLE task_state" in result.stdout
    assert table_names() >= STATE_TABLES
    assert state_revision() == HEAD


def test_downgrade_asks_before_dropping():
    result = run_airflow("state-db", "downgrade", "--to-revision", "base", check=False, input="n\n")
    assert "Cancelled" in result.stderr
    assert table_names() >= STATE_TABLES


@pytest.mark.parametrize("extra", [[], ["--use-migration-files"]], ids=["orm", "migration-files"])
def test_db_reset_drops_and_rebuilds_the_state_tables(backend, make_dag_run, unique, extra, db_kind):
    if extra and db_kind == "mysql":
        pytest.skip(
            "Airflow 3.2's own migration files cannot build a database from scratch on MariaDB "
            "(REGEXP_REPLACE with MySQL 8 arguments); test_upgrade_downgrade_upgrade runs ours from files"
        )
    # PostgreSQL and MySQL refuse to drop dag_run while task_state references it: the reset
    # hook drops our tables first.
    make_dag_run(f"dag_{unique}", "run")
    backend.set(TaskScope(f"dag_{unique}", "run", "task"), "k", "v")

    run_airflow("db", "reset", "--yes", *extra)

    from airflow import settings
    from airflow.state.metastore.models import TaskStateModel

    assert table_names() >= STATE_TABLES
    assert state_revision() == HEAD
    with settings.engine.connect() as conn:
        assert conn.execute(select(TaskStateModel.__table__)).all() == []
