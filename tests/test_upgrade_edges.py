"""
airflow-state-upgrade where a deployer's run goes off the documented path: a 3.2 process left
running after the move, a script reading `-o json` once the tables are gone, a drop nobody
confirmed. Each on a small SQLite database: Airflow 3.3's schema from its own `airflow db migrate`
(once per module, copied for each test), ours created at revision 0113's schema, so no Airflow 3.2
run is needed (tests/test_upgrade_to_airflow33.py moves what real 3.2 tasks wrote).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from state_testing.airflow33 import airflow33

# Proves the command's own logic, not a database's: it runs once, in the SQLite pass.
pytestmark = pytest.mark.any_database

OUR_SCHEMA_AT_0113 = """
CREATE TABLE task_state (dag_run_id INTEGER NOT NULL REFERENCES dag_run(id) ON DELETE CASCADE,
 task_id VARCHAR(250) NOT NULL, map_index INTEGER DEFAULT -1 NOT NULL, key VARCHAR(512) NOT NULL,
 dag_id VARCHAR(250) NOT NULL, run_id VARCHAR(250) NOT NULL, value TEXT NOT NULL,
 updated_at TIMESTAMP NOT NULL, updated_by_try INTEGER, version INTEGER DEFAULT 1 NOT NULL,
 expires_at TIMESTAMP, PRIMARY KEY (dag_run_id, task_id, map_index, key));
CREATE TABLE asset_state (asset_id INTEGER NOT NULL REFERENCES asset(id) ON DELETE CASCADE,
 key VARCHAR(512) NOT NULL, value TEXT NOT NULL, updated_at TIMESTAMP NOT NULL,
 version INTEGER DEFAULT 1 NOT NULL, expires_at TIMESTAMP, updated_by VARCHAR(16),
 updated_by_dag_id VARCHAR(250), updated_by_run_id VARCHAR(250), updated_by_task_id VARCHAR(250),
 updated_by_map_index INTEGER, updated_by_try INTEGER, PRIMARY KEY (asset_id, key));
CREATE TABLE alembic_version_state (version_num VARCHAR(32) NOT NULL PRIMARY KEY);
INSERT INTO alembic_version_state VALUES ('c4a8f2d60113');
INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after)
 VALUES (1, 'd', 'r1', 'manual', '2026-01-01 00:00:00.000000');
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A database with Airflow 3.3's schema and ours, no state yet."""
    path = tmp_path_factory.mktemp("upgrade-edges") / "airflow.db"
    af33 = airflow33()
    af33.run("airflow", "db", "migrate", env=af33.env(f"sqlite:///{path}", path.parent / "home"))
    with sqlite3.connect(path) as connection:
        connection.executescript(OUR_SCHEMA_AT_0113)
    return path


class Database:
    def __init__(self, template: Path, folder: Path) -> None:
        self.path = folder / "airflow.db"
        # SQLite's own copy: the template may be in WAL mode, its last writes not in the main file yet.
        with sqlite3.connect(template) as source, sqlite3.connect(self.path) as copy:
            source.backup(copy)
        self.af33 = airflow33()
        self.env = self.af33.env(f"sqlite:///{self.path}", folder / "home")

    def write_task_key(self, key: str, updated_at: datetime) -> None:
        """What a 3.2 task's write leaves in our table."""
        with sqlite3.connect(self.path) as connection:
            connection.execute(
                "INSERT INTO task_state (dag_run_id, task_id, map_index, key, dag_id, run_id, value, "
                "updated_at, updated_by_try) VALUES (1, 't', -1, ?, 'd', 'r1', '\"v\"', ?, 1)",
                (key, updated_at.strftime("%Y-%m-%d %H:%M:%S.%f")),
            )

    def airflow33_keys(self) -> list[str]:
        with sqlite3.connect(self.path) as connection:
            return [key for (key,) in connection.execute("SELECT key FROM task_state_store ORDER BY key")]

    def our_tables(self) -> list[str]:
        with sqlite3.connect(self.path) as connection:
            query = "SELECT name FROM sqlite_master WHERE name IN ('task_state', 'asset_state')"
            return sorted(name for (name,) in connection.execute(query))

    def upgrade(self, *args: str):
        return self.af33.run("airflow-state-upgrade", *args, env=self.env, check=False)


@pytest.fixture
def database(migrated: Path, tmp_path: Path) -> Database:
    return Database(migrated, tmp_path)


def test_a_key_a_32_process_wrote_after_the_move_moves_on_the_next_run(database: Database):
    database.write_task_key("before_the_move", datetime(2026, 1, 2, tzinfo=UTC))
    assert database.upgrade().returncode == 0
    # A 3.2 worker nobody stopped writes after the move, which 3.3 never saw.
    database.write_task_key("after_the_move", datetime.now(UTC))
    with sqlite3.connect(database.path) as connection:  # and a 3.3 task deletes a key that moved
        connection.execute("DELETE FROM task_state_store WHERE key = 'before_the_move'")

    again = database.upgrade("--drop-old-tables", "-y", "-o", "json")
    report = json.loads(again.stdout)["tables"]["task_state"]
    assert again.returncode == 0, again.stderr
    # The late key moves; the one 3.3 deleted stays deleted, and only that one is called so.
    assert (report["moved"], report["deleted_in_airflow33"]) == (1, 1)
    assert database.airflow33_keys() == ["after_the_move"]
    assert database.our_tables() == []


def test_json_output_stays_one_document_once_the_tables_are_dropped(database: Database):
    database.write_task_key("k", datetime(2026, 1, 2, tzinfo=UTC))
    assert database.upgrade("--drop-old-tables", "-y").returncode == 0
    again = database.upgrade("-o", "json")
    assert again.returncode == 0
    assert json.loads(again.stdout)["complete"] is True  # scripts pipe -o json into jq
    assert "Nothing to move" in again.stderr


def test_a_drop_not_confirmed_fails_and_drops_nothing(database: Database):
    database.write_task_key("k", datetime(2026, 1, 2, tzinfo=UTC))
    # No terminal to ask on (cron, CI): only -y drops, and a script must see that it did not.
    unconfirmed = database.upgrade("--drop-old-tables")
    assert unconfirmed.returncode == 1
    assert "Not dropping the old tables: not confirmed (-y drops without asking)." in unconfirmed.stderr
    assert database.our_tables() == ["asset_state", "task_state"]
    assert database.airflow33_keys() == ["k"]  # the move itself happened
    # A dry run's drop is only described: not a failure.
    assert database.upgrade("--drop-old-tables", "--dry-run").returncode == 0
