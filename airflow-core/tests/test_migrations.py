"""
Our migration chain on Airflow 3.2 (0112, 0113 the head), run by real `airflow` commands on the
database of the run. On Airflow 3.3 the chain goes on to 0114, to other tables of this package:
test_migrations_airflow33.py.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from airflow_shared.state import AssetScope, TaskScope, VersionedValue
from sqlalchemy import inspect, select, text
from state_testing.airflow_cli import run_airflow
from state_testing.schema import table_ddl

pytestmark = pytest.mark.only_airflow32

STATE_TABLES = {"task_state", "asset_state"}
FIRST = "b7d3e1a90112"
HEAD = "c4a8f2d60113"
VERSIONS = Path(__file__).parents[1] / "src/airflow_task_state/metastore/migrations/versions"
MIGRATIONS = [
    VERSIONS / "0112_3_3_0_add_task_state_and_asset_state.py",
    VERSIONS / "0113_3_3_0_add_versions_expiry_and_writers.py",
]


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
    from airflow_task_state.metastore.models import metadata
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    def ours(obj, name, type_, reflected, compare_to):
        return type_ != "table" or name in STATE_TABLES

    with settings.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_object": ours, "compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(context, metadata)


def test_chain_is_0112_then_0113_and_0113_is_the_head():
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.db_manager import StateDBManager

    with create_session() as session:
        script = StateDBManager(session).get_script_object()
    assert script.get_heads() == [HEAD]
    head, first = script.walk_revisions()
    assert [Path(first.path), Path(head.path)] == MIGRATIONS
    assert (first.revision, first.down_revision) == (FIRST, None)
    assert (head.revision, head.down_revision) == (HEAD, FIRST)
    # The version a revision names is an airflow-task-state release, as revision_heads_map's keys.
    assert StateDBManager.revision_heads_map == {
        first.module.state_version: FIRST,
        head.module.state_version: HEAD,
    }
    assert list(StateDBManager.revision_heads_map) == ["0.1.0", "0.2.0"]


@pytest.mark.parametrize("migration", MIGRATIONS, ids=lambda path: path.name[:4])
def test_the_migrations_import_no_model(migration):
    """History stays put: changing a model later must not change what a revision creates."""
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('migration', {str(migration)!r}); "
        "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
        "print(sorted(m for m in sys.modules if m.startswith('airflow_task_state.metastore.models')))"
    )
    # (Importing Airflow loads our provider info, so airflow_task_state itself is there anyway.)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(migration.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not {name for name in imported if name and name.startswith("airflow_task_state")}


def _migration_tables() -> sa.MetaData:
    """The tables the chain builds, from the revisions' own column types, without a database."""
    tables = sa.MetaData()
    for referenced in ("dag_run", "asset"):
        sa.Table(referenced, tables, sa.Column("id", sa.Integer, primary_key=True))

    class RecordingBatch:
        def __init__(self, table):
            self.table = table

        def add_column(self, column):
            self.table.append_column(column)

        def create_index(self, name, columns):
            sa.Index(name, *(self.table.c[column] for column in columns))

    class RecordingOp:
        def create_table(self, name, *columns):
            sa.Table(name, tables, *columns)

        def create_index(self, name, table, columns):
            sa.Index(name, *(tables.tables[table].c[column] for column in columns))

        @contextmanager
        def batch_alter_table(self, name, **options):
            yield RecordingBatch(tables.tables[name])

    for path in MIGRATIONS:
        spec = importlib.util.spec_from_file_location(f"migration_{path.name[:4]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.op = RecordingOp()
        module.upgrade()
    return tables


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql", "mysql"])
def test_migration_and_models_emit_the_same_ddl(dialect_name):
    from airflow_task_state.metastore.models import metadata

    migration = _migration_tables()
    for name in STATE_TABLES:
        assert table_ddl(migration, name, dialect_name) == table_ddl(metadata, name, dialect_name)


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
    assert "DROP COLUMN version" in result.stdout
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
    from airflow_task_state.metastore.models import TaskStateModel

    assert table_names() >= STATE_TABLES
    assert state_revision() == HEAD
    with settings.engine.connect() as conn:
        assert conn.execute(select(TaskStateModel.__table__)).all() == []


def test_0113_keeps_existing_keys_at_version_1_never_expiring_and_downgrades_to_0112(
    backend, make_dag_run, make_asset, unique
):
    """Upgrading a 0.1.0 database keeps every key; downgrading to 0112 keeps them too."""
    from airflow import settings

    dag_run_id = make_dag_run(f"dag_{unique}", "run")
    asset_id = make_asset(1)
    run_airflow("state-db", "downgrade", "--to-revision", FIRST, "--yes")
    assert state_revision() == FIRST
    with settings.engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("asset_state")}
        assert not columns & {"version", "expires_at", "updated_by"}
    # Rows as 0.1.0 wrote them, with 0112's columns only.
    with settings.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO task_state (dag_run_id, task_id, map_index, "
                + ("`key`" if conn.dialect.name == "mysql" else '"key"')
                + ", dag_id, run_id, value, updated_at, updated_by_try) "
                "VALUES (:id, 'task', -1, :key, :dag_id, 'run', '41', :now, 2)"
            ),
            {
                "id": dag_run_id,
                "key": b"old" if conn.dialect.name == "mysql" else "old",
                "dag_id": f"dag_{unique}",
                "now": datetime(2026, 1, 1),
            },
        )
        conn.execute(
            text(
                "INSERT INTO asset_state (asset_id, "
                + ("`key`" if conn.dialect.name == "mysql" else '"key"')
                + ", value, updated_at) VALUES (:id, :key, '\"w\"', :now)"
            ),
            {
                "id": asset_id,
                "key": b"old" if conn.dialect.name == "mysql" else "old",
                "now": datetime(2026, 1, 1),
            },
        )

    run_airflow("db", "migrate", "--use-migration-files")
    assert state_revision() == HEAD
    assert schema_differences() == []
    task, asset = TaskScope(f"dag_{unique}", "run", "task"), AssetScope(asset_id)
    assert backend.get_versioned(task, "old") == VersionedValue("41", 1)
    assert backend.get_versioned(asset, "old") == VersionedValue('"w"', 1)
    (task_entry,) = backend.entries(task).entries
    assert (task_entry.version, task_entry.expires_at, task_entry.updated_by_try) == (1, None, 2)
    (asset_entry,) = backend.entries(asset).entries
    assert (asset_entry.version, asset_entry.expires_at, asset_entry.writer) == (1, None, None)
    assert backend.increment(task, "old") == 42
    assert backend.get_versioned(task, "old") == VersionedValue("42", 2)

    run_airflow("state-db", "downgrade", "--to-revision", FIRST, "--yes")
    assert state_revision() == FIRST
    with settings.engine.connect() as conn:
        assert {c["name"] for c in inspect(conn).get_columns("task_state")} == {
            "dag_run_id",
            "task_id",
            "map_index",
            "key",
            "dag_id",
            "run_id",
            "value",
            "updated_at",
            "updated_by_try",
        }
        assert conn.execute(
            text("SELECT value FROM task_state WHERE dag_id = :d"), {"d": f"dag_{unique}"}
        ).all() == [("42",)]
        assert conn.execute(
            text("SELECT value FROM asset_state WHERE asset_id = :a"), {"a": asset_id}
        ).all() == [('"w"',)]
    run_airflow("db", "migrate", "--use-migration-files")
    assert state_revision() == HEAD
    assert backend.get_versioned(task, "old") == VersionedValue("42", 1)
