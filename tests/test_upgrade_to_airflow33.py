"""
A deployment on Airflow 3.2 with real state upgrades to Airflow 3.3 in place, as docs/upgrading.md
says: on a database of this module's own, on each of SQLite, PostgreSQL and MariaDB.

1. Airflow 3.2 with airflow-task-state (this venv): ``airflow db migrate``; a run of the test DAG
   (tests/dags/upgrade): in the SQLite pass ``airflow dags test`` runs it (mapped task instances,
   assets, a staged write, a resumable task that loses its worker after storing its job id), in the
   others it is only triggered (its tasks' state is the fill's, and that pass spends the minute
   on what differs by database); then tests/upgrade_scripts/fill_state_32.py writes through our
   backend what server code can (unusual keys and values, versions, expiries future and past,
   writers of each kind, a commit record, over 1000 keys: several batches), large values as task
   code writes them (objects in a ``file://`` store both lines are configured with, references in
   the store), and records every key as our backend reads it.
2. Airflow 3.3.2 (the cached second venv, with airflow-task-state): ``airflow db migrate`` on that
   database. The first attempt fails on purpose at the end of the move (a trigger refuses a DELETE
   on asset_state): nothing of it may stay. Then a key is given a newer value in Airflow's store, as
   a 3.3 task would have written it, another one is copied there as the retired
   airflow-state-upgrade copied keys, and ``airflow db migrate`` moves the rest.
3. The checks below, then the round trip of a rollback (``airflow state-db downgrade``, then
   ``airflow db migrate`` again), and in the SQLite pass the 3.2 run's lost task, run again by 3.3.

Module-scoped, the tests in file order (the later ones change the database). ``pytest -s`` prints
each phase's seconds. What it costs (this machine, 2 cores shared): see docs/upgrading.md, "How the
upgrade is proven".
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, Table, create_engine, inspect, select, text
from sqlalchemy.pool import NullPool
from state_testing import dbservers
from state_testing.airflow33 import Airflow33, airflow33
from state_testing.airflow_cli import run_checked

UPGRADE_DAGS = Path(__file__).parent / "dags" / "upgrade"
SCRIPTS = Path(__file__).parent / "upgrade_scripts"
AIRFLOW_32 = Path(sys.executable).with_name("airflow")
DAG_ID = "upgrade_state"
OURS = ("task_state", "asset_state")
META = ("task_state_meta", "asset_state_meta")
AIRFLOWS = ("task_state_store", "asset_state_store")
AT_0113 = "c4a8f2d60113"
HEAD = "e5b1c7f30114"
#: (task id, map index, key) of the key Airflow 3.3 wrote again before the move: its value is kept.
HELD = ("process", 1, "twice")
HELD_VALUE = json.dumps({"written": "by Airflow 3.3"})
#: A key airflow-state-upgrade (retired in 0.8) copied into Airflow's store, its value re-encoded.
COPIED = ("process", 0, "value/text_non_ascii")
SCOPE = ("dag_id", "run_id", "task_id", "map_index")
#: The table airflow-state-upgrade (retired in 0.8) kept its record of a move in.
RETIRED_RECORD = "airflow_state_upgrade"

TIMINGS: dict[str, float] = {}


@contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    TIMINGS[name] = round(time.monotonic() - started, 1)
    print(f"[upgrade timing] {name}: {TIMINGS[name]}s", flush=True)


# --- the module's database ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def database_url(db_kind: str, tmp_path_factory) -> Iterator[str]:
    """A database of this module's own: Airflow 3.3's migrations never touch the session's."""
    with dbservers.scratch_database(db_kind, tmp_path_factory.mktemp("upgrade-db")) as url:
        yield url


@contextmanager
def connect(url: str):
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            yield connection
    finally:
        engine.dispose()


def reflected(connection, table: str) -> Table:
    return Table(table, MetaData(), autoload_with=connection)


def contents(url: str, *tables: str) -> dict[str, list[tuple] | None]:
    """Every row of each table, every column, in primary-key order (None: no such table)."""
    found: dict[str, list[tuple] | None] = {}
    with connect(url) as connection:
        existing = set(inspect(connection).get_table_names())
        for name in tables:
            if name not in existing:
                found[name] = None
                continue
            table = reflected(connection, name)
            order = table.primary_key.columns or table.columns
            found[name] = [tuple(row) for row in connection.execute(select(table).order_by(*order))]
    return found


def state_revision(url: str) -> str:
    with connect(url) as connection:
        return connection.execute(text("SELECT version_num FROM alembic_version_state")).scalar_one()


# --- the deployment, before and after ---------------------------------------------------------------


@dataclass
class Deployment:
    url: str
    db_kind: str
    jobs: Path
    env32: dict[str, str]
    af33: Airflow33 | None = None
    env33: dict[str, str] = field(default_factory=dict)
    #: What our backend read back on 3.2 (fill_state_32.py's dump).
    expected: dict[str, Any] = field(default_factory=dict)
    #: Table contents (and our tables' schema) at moments of the upgrade, by name.
    snapshots: dict[str, dict] = field(default_factory=dict)
    #: The runs of `airflow db migrate` and other commands, by name: (exit status, output).
    runs: dict[str, tuple[int, str]] = field(default_factory=dict)

    def airflow32(self, *args: str | Path, check: bool = True, **env: str) -> str:
        result = run_checked([AIRFLOW_32, *args], env={**self.env32, **env}, label="Airflow 3.2", check=check)
        return result.stdout + result.stderr

    def airflow33(self, name: str, *args: str | Path, program: str = "airflow") -> tuple[int, str]:
        assert self.af33 is not None
        result = self.af33.run(program, *args, env=self.env33, check=False)
        self.runs[name] = (result.returncode, result.stdout + result.stderr)
        return self.runs[name]


def _dags_folder(home: Path) -> None:
    folder = home / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    for path in UPGRADE_DAGS.glob("*.py"):
        shutil.copy(path, folder / path.name)


def _stays(item: dict, db_kind: str) -> bool:
    """Whether the upgrade leaves the key *item* (of the 3.2 dump) in our table."""
    if (item.get("task_id"), item.get("map_index"), item["key"]) == HELD:
        return True  # Airflow 3.3 holds a newer value
    if db_kind != "mysql":
        return False
    key = item["key"]
    # Airflow's utf8mb3 (or PAD SPACE) key column on MySQL cannot hold these; its case-insensitive
    # collation does not tell "retry-count" from "Retry-Count", which moved first (bytes order).
    return key.endswith(" ") or any(ord(character) > 0xFFFF for character in key) or key == "retry-count"


_REFUSE_A_DELETE = {
    "sqlite": [
        "CREATE TRIGGER refuse_move BEFORE DELETE ON asset_state "
        "BEGIN SELECT RAISE(ABORT, 'the test refuses this delete'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse_move() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION 'the test refuses this delete'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_move BEFORE DELETE ON asset_state FOR EACH ROW EXECUTE FUNCTION refuse_move()",
    ],
    "mysql": [
        "CREATE TRIGGER refuse_move BEFORE DELETE ON asset_state FOR EACH ROW "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the test refuses this delete'"
    ],
}


def _write_as_airflow33(url: str, db_kind: str) -> None:
    """
    Rows of Airflow's task_state_store from before the move: HELD as Airflow 3.3's own backend
    writes a key (JSON text, now), COPIED as airflow-state-upgrade copied ours (same time, the
    value as ``json.dumps`` writes it).
    """
    with connect(url) as connection:
        ours, rows = reflected(connection, "task_state"), reflected(connection, "task_state_store")
        for (task_id, map_index, key), copied in ((HELD, False), (COPIED, True)):
            where = [ours.c.task_id == task_id, ours.c.map_index == map_index]
            where.append(ours.c.key == (key.encode() if db_kind == "mysql" else key))
            row = connection.execute(select(ours).where(*where)).one()._mapping
            now = datetime.now(UTC) if db_kind == "postgres" else datetime.now(UTC).replace(tzinfo=None)
            connection.execute(
                rows.insert().values(
                    **{
                        name: row[name] for name in ("dag_run_id", "dag_id", "run_id", "task_id", "map_index")
                    },
                    key=key,
                    value=json.dumps(json.loads(row["value"])) if copied else HELD_VALUE,
                    updated_at=row["updated_at"] if copied else now,
                    expires_at=row["expires_at"] if copied else None,
                )
            )


@pytest.fixture(scope="module")
def deployment(database_url: str, db_kind: str, tmp_path_factory) -> Deployment:
    """Airflow 3.2 with state, then Airflow 3.3's `airflow db migrate`: one that fails, one that works."""
    home32, jobs = tmp_path_factory.mktemp("airflow32-home"), tmp_path_factory.mktemp("remote-jobs")
    objects = f"file://{tmp_path_factory.mktemp('large-value-objects')}"
    _dags_folder(home32)
    env32 = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW__")}
    env32 |= {
        "AIRFLOW_HOME": str(home32),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home32 / "dags"),
        "UPGRADE_TEST_JOBS_DIR": str(jobs),
        "AIRFLOW__STATE__OBJECT_STORAGE_PATH": objects,
    }
    deployment = Deployment(database_url, db_kind, jobs, env32)
    with phase(f"{db_kind}: 3.2 airflow db migrate + the DAG's run"):
        deployment.airflow32("db", "migrate")
        if db_kind == "sqlite":
            ran = deployment.airflow32("dags", "test", DAG_ID, check=False, UPGRADE_TEST_LOSE_WORKER="1")
            assert "simulated worker loss after storing" in ran, ran[-3000:]
        else:
            deployment.airflow32("dags", "reserialize")
            deployment.airflow32("dags", "trigger", DAG_ID)
    with phase(f"{db_kind}: 3.2 fill (server code)"):
        dump = home32 / "expected.json"
        run_checked([sys.executable, SCRIPTS / "fill_state_32.py", dump], env=env32, label="fill")
        deployment.expected = json.loads(dump.read_text(encoding="utf-8"))
    deployment.snapshots["3.2"] = contents(database_url, *OURS)
    with connect(database_url) as connection:
        deployment.snapshots["3.2 schema"] = {name: _schema(connection, name) for name in OURS}
        for statement in _REFUSE_A_DELETE[db_kind]:
            connection.exec_driver_sql(statement)

    with phase(f"{db_kind}: 3.3 venv"):
        deployment.af33 = airflow33()
    home33 = tmp_path_factory.mktemp("airflow33-home")
    _dags_folder(home33)
    deployment.env33 = deployment.af33.env(
        database_url,
        home33,
        UPGRADE_TEST_JOBS_DIR=str(jobs),
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        AIRFLOW__STATE__OBJECT_STORAGE_PATH=objects,
    )
    with phase(f"{db_kind}: 3.3 airflow db migrate, failing in the move"):
        deployment.airflow33("refused", "db", "migrate")
    deployment.snapshots["refused"] = contents(database_url, *OURS, *META, *AIRFLOWS)
    deployment.snapshots["refused revision"] = {"revision": state_revision(database_url)}
    with connect(database_url) as connection:
        connection.exec_driver_sql(
            "DROP TRIGGER refuse_move" + (" ON asset_state" if db_kind == "postgres" else "")
        )
    _write_as_airflow33(database_url, db_kind)
    with connect(database_url) as connection:  # what airflow-state-upgrade kept of its moves
        connection.exec_driver_sql(f"CREATE TABLE {RETIRED_RECORD} (completed_at VARCHAR(40))")
    with phase(f"{db_kind}: 3.3 airflow db migrate"):
        deployment.airflow33("migrate", "db", "migrate")
    deployment.snapshots["migrated"] = contents(database_url, *OURS, *META, *AIRFLOWS, RETIRED_RECORD)
    return deployment


def _schema(connection, table: str) -> dict:
    found = inspect(connection)
    columns = [
        (column["name"], str(column["type"]), column["nullable"], str(column.get("default")))
        for column in found.get_columns(table)
    ]
    indexes = sorted((index["name"], tuple(index["column_names"])) for index in found.get_indexes(table))
    keys = found.get_foreign_keys(table)
    return {"columns": columns, "primary": found.get_pk_constraint(table), "indexes": indexes, "fks": keys}


def moved(deployment: Deployment, kind: str) -> list[dict]:
    return [item for item in deployment.expected[kind] if not _stays(item, deployment.db_kind)]


def left(deployment: Deployment, kind: str) -> list[dict]:
    return [item for item in deployment.expected[kind] if _stays(item, deployment.db_kind)]


# --- 1. what Airflow 3.2 left ---------------------------------------------------------------------


def test_airflow_32_left_state_of_every_kind(deployment: Deployment):
    """Cost: none (the module's set-up: about 1 min on SQLite, 2 on MariaDB, on this machine)."""
    task, asset = deployment.expected["task"], deployment.expected["asset"]
    assert {(item["task_id"], item["map_index"]) for item in task} >= {("process", 0), ("process", 2)}
    assert any(item["task_id"] == "airflow:staged-commits" for item in task)  # a commit's record
    assert any(item["version"] > 1 for item in task) and any(item["expires_at"] for item in task)
    writers = {item["writer"] for item in asset}
    assert {"api", "cli"} < writers and any("/publish" in str(writer) for writer in writers)  # and a task
    assert any(item["expires_at"] for item in asset) and any(item["updated_by_try"] for item in task)
    assert len(task) > 1000  # the move takes more than one batch
    if deployment.db_kind == "sqlite":  # the DAG's own run
        [job] = [item for item in task if item["key"] == "remote_job_id"]
        assert [path.stem for path in deployment.jobs.glob("*.submitted")] == [json.loads(job["value"])]
        assert {(item["map_index"], item["version"]) for item in task if item["key"] == "batches"} == {
            (0, 2),
            (1, 2),
            (2, 2),
        }


# --- 2. the migration ------------------------------------------------------------------------------


def test_a_move_that_fails_changes_nothing_and_the_next_migrate_runs_it(deployment: Deployment):
    """One transaction: the move failed at its end (asset_state), and every row of ours is still there."""
    status, output = deployment.runs["refused"]
    assert status != 0 and "the test refuses this delete" in output, output[-3000:]
    refused = deployment.snapshots["refused"]
    assert {name: refused[name] for name in OURS} == deployment.snapshots["3.2"]
    assert refused["task_state_store"] == refused["asset_state_store"] == []
    # On MySQL (and SQLite) a CREATE TABLE commits on its own: the meta tables may remain, empty.
    assert all(refused[name] in (None, []) for name in META), {name: refused[name] for name in META}
    assert deployment.snapshots["refused revision"]["revision"] == AT_0113
    status, output = deployment.runs["migrate"]
    assert status == 0, output[-3000:]
    assert state_revision(deployment.url) == HEAD


def test_what_stays_behind_is_kept_whole_and_reported(deployment: Deployment):
    """Cost: a few reads."""
    output = deployment.runs["migrate"][1]
    migrated, before = deployment.snapshots["migrated"], deployment.snapshots["3.2"]
    stays = {kind: left(deployment, kind) for kind in ("task", "asset")}
    assert len(stays["task"]) == (1 if deployment.db_kind != "mysql" else 1 + 3 * 5)
    # Nothing lost: the rows that stayed are the very rows 3.2 wrote.
    for name, kind in zip(OURS, ("task", "asset"), strict=True):
        if not stays[kind]:
            assert migrated[name] is None, f"{name} kept nothing and should be dropped"
            continue
        kept = [row for row in before[name] if _key_of(row, name) in {_named(item) for item in stays[kind]}]
        assert migrated[name] == kept
        assert f"{name}: {len(stays[kind])} key(s) stayed in table {name}" in output, output[-3000:]
    for item in stays["task"][:20]:
        assert f"{item['task_id']} [{item['map_index']}], key {item['key']!r}: " in output
    assert migrated[RETIRED_RECORD] is None  # dropped
    held = "process [1], key 'twice': Airflow's store already holds this key"
    assert held in output, output[-3000:]
    if deployment.db_kind == "mysql":
        assert "cannot hold it (a character beyond U+FFFF, or a trailing space)" in output


def _named(item: dict) -> tuple:
    return (item.get("task_id"), item.get("map_index"), item.get("asset_id"), item["key"])


def _key_of(row: tuple, table: str) -> tuple:
    """The (task id, map index, asset id, key) of a raw row of our table (keys are bytes on MySQL)."""
    if table == "task_state":
        key = row[3].decode() if isinstance(row[3], bytes) else row[3]
        return (row[1], row[2], None, key)
    key = row[1].decode() if isinstance(row[1], bytes) else row[1]
    return (None, None, row[0], key)


def test_meta_rows_compare_keys_as_airflows_rows_do(deployment: Deployment):
    """On MySQL Airflow 3.3's own migration gives its key column the database's collation: ours follow."""
    if deployment.db_kind != "mysql":
        pytest.skip("keys compare exactly on PostgreSQL and SQLite")
    with connect(deployment.url) as connection:
        columns = connection.execute(
            text(
                "SELECT table_name, character_set_name, collation_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND column_name = 'key' AND table_name LIKE '%state_%'"
            )
        ).all()
    kinds = {table: (charset, collation) for table, charset, collation in columns}
    assert kinds["task_state_meta"] == kinds["task_state_store"], kinds
    assert kinds["asset_state_meta"] == kinds["asset_state_store"], kinds


# --- 3. both APIs read it --------------------------------------------------------------------------


def _read(deployment: Deployment, line: str) -> dict:
    """What *line*'s interpreter reads back (tests/upgrade_scripts/read_state.py), in one process."""
    home = Path(deployment.env33["AIRFLOW_HOME"])
    expected, out = home / "expected.json", home / f"read-{line}.json"
    expected.write_text(json.dumps(deployment.expected, ensure_ascii=False), encoding="utf-8")
    if line == "3.3":
        status, output = deployment.airflow33(
            "read", SCRIPTS / "read_state.py", expected, out, program="python"
        )
        assert status == 0, output[-3000:]
    else:
        run_checked(
            [sys.executable, SCRIPTS / "read_state.py", expected, out], env=deployment.env32, label="read"
        )
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def read_33(deployment: Deployment) -> dict:
    """What Airflow 3.3 reads, through our backend, its own, and its REST API (one 3.3 process)."""
    with phase(f"{deployment.db_kind}: 3.3 read back (both APIs, REST)"):
        return _read(deployment, "3.3")


def _as_read(entry: dict | None) -> dict | None:
    """An entry as the test compares it: its value decoded (the COPIED key's text is json.dumps')."""
    if entry is None:
        return None
    names = ("key", "version", "updated_at", "expires_at", "updated_by_try", "writer")
    return {name: entry[name] for name in names} | {"value": json.loads(entry["value"])}


def test_our_api_reads_every_key_with_its_version_expiry_and_writer(deployment: Deployment, read_33: dict):
    for kind in ("task", "asset"):
        wrong = []
        for item, read in zip(deployment.expected[kind], read_33["ours"][kind], strict=True):
            if not _stays(item, deployment.db_kind):
                if _as_read(read) != _as_read(item):
                    wrong.append((item, read))
            elif read is not None and read["value"] == item["value"]:
                wrong.append(("stayed behind, yet read", item))
        assert wrong == [], wrong[:5]
    # Every scope lists exactly the keys that moved (one meta row per key: no key twice).
    for scope, keys in read_33["keys"].items():
        wanted = {
            item["key"] for item in moved(deployment, "task") if "/".join(map(str, _scope(item))) == scope
        }
        if scope == "/".join(map(str, (DAG_ID, deployment.expected["run_id"], *HELD[:2]))):
            wanted.add(HELD[2])
        assert sorted(keys) == sorted(wanted), scope


def _scope(item: dict) -> tuple:
    return tuple(item[name] for name in SCOPE)


def test_the_key_airflow33_wrote_is_kept(deployment: Deployment, read_33: dict):
    [index] = [
        number
        for number, item in enumerate(deployment.expected["task"])
        if (item["task_id"], item["map_index"], item["key"]) == HELD
    ]
    ours, airflows = read_33["ours"]["task"][index], read_33["airflow"]["task"][index]
    assert airflows == HELD_VALUE
    # Written by Airflow's own writer: the next version, no try (docs: beside_airflow33).
    assert (ours["value"], ours["version"], ours["updated_by_try"]) == (HELD_VALUE, 1, None)


def test_airflow33s_own_backend_and_rest_api_read_the_values(deployment: Deployment, read_33: dict):
    for kind in ("task", "asset"):
        wrong = [
            (item["key"], read)
            for item, read in zip(deployment.expected[kind], read_33["airflow"][kind], strict=True)
            if not _stays(item, deployment.db_kind)
            and (read is None or json.loads(read) != json.loads(item["value"]))
        ]
        assert wrong == [], wrong[:5]
    rest = read_33["rest"]
    assert rest["status"] == 200, rest
    wanted = {
        item["key"]: json.loads(item["value"])
        for item in moved(deployment, "task")
        if (item["task_id"], item["map_index"]) == ("process", 1)
    } | {HELD[2]: json.loads(HELD_VALUE)}
    # Its first page (Airflow caps a page at 100 keys), and how many it counts.
    shown = {entry["key"]: entry["value"] for entry in rest["body"]["task_state_store"]}
    assert rest["body"]["total_entries"] == len(wanted)
    assert shown == {key: wanted[key] for key in shown} and len(shown) == 100


def test_large_values_read_back_through_our_api_and_airflows_own_sees_their_references(
    deployment: Deployment, read_33: dict
):
    """
    A large value is its reference in the store, moved like any value: task code on 3.3 reads the
    value it names (checked), and Airflow 3.3's own accessor reads the reference's JSON text.
    """
    written = deployment.expected["large"]
    assert set(written) == {"large/results", "large/checkpoint", "large/asset file"}
    assert read_33["large"] == written
    for kind in ("task", "asset"):
        for item, airflows in zip(deployment.expected[kind], read_33["airflow"][kind], strict=True):
            if item["key"] in written:
                reference = json.loads(airflows)
                assert list(reference) == ["$airflow_task_state.large_value"], airflows[:200]
                assert reference == json.loads(item["value"])


def test_expired_keys_are_not_carried(deployment: Deployment, read_33: dict):
    assert read_33["expired"] == [None] * (1 + len(deployment.expected["assets"]))
    airflows = deployment.snapshots["migrated"]
    assert not [row for row in airflows["task_state_store"] if row[4] == "expired/one"]


# --- 4. migrate again, check-migrations ------------------------------------------------------------


def test_migrate_again_changes_nothing_and_check_migrations_is_happy(deployment: Deployment, read_33: dict):
    """Cost: two 3.3 commands."""
    before = contents(deployment.url, *OURS, *META, *AIRFLOWS)
    with phase(f"{deployment.db_kind}: 3.3 airflow db migrate again, check-migrations"):
        status, output = deployment.airflow33("again", "db", "migrate")
        checked, check_output = deployment.airflow33("check", "db", "check-migrations", "-t", "5")
    assert status == 0, output[-3000:]
    assert "Running upgrade" not in output
    assert contents(deployment.url, *OURS, *META, *AIRFLOWS) == before
    assert checked == 0, check_output[-3000:]


# --- 5. the way back, and forth again ---------------------------------------------------------------


def test_rollback_to_airflow32_keeps_every_key_and_the_upgrade_after_it_too(deployment: Deployment):
    """
    The rollback of docs/upgrading.md: `airflow state-db downgrade` to 0113 copies every key back
    into our tables as 3.2 had them (with the value Airflow 3.3 wrote last), `airflow db downgrade`
    takes Airflow back to 3.2, whose airflow-task-state then reads every key. Then the upgrade once
    more: the same store as after the first. Cost: three 3.3 commands and a 3.2 process.
    """
    kind = deployment.db_kind
    with phase(f"{kind}: 3.3 state-db downgrade + airflow db downgrade, 3.2 read back"):
        status, output = deployment.airflow33("downgrade", "state-db", "downgrade", "-r", AT_0113, "-y")
        assert status == 0, output[-3000:]
        down = contents(deployment.url, *OURS, *META, *AIRFLOWS)
        with connect(deployment.url) as connection:
            schema = {name: _schema(connection, name) for name in OURS}
        status, output = deployment.airflow33("airflow downgrade", "db", "downgrade", "-n", "3.2.1", "-y")
        assert status == 0, output[-3000:]
        read_32 = _read(deployment, "3.2")
    assert down["task_state_meta"] is None and down["asset_state_meta"] is None
    assert schema == deployment.snapshots["3.2 schema"]
    migrated = deployment.snapshots["migrated"]
    assert {name: down[name] for name in AIRFLOWS} == {name: migrated[name] for name in AIRFLOWS}
    expected = {
        name: [row for row in rows if _key_of(row, name)[3] != "expired/one"]
        for name, rows in deployment.snapshots["3.2"].items()
    }
    held = _named({"task_id": HELD[0], "map_index": HELD[1], "key": HELD[2]})
    [airflows] = [row for row in down["task_state_store"] if (row[2], row[3], None, row[4]) == held]
    for position, row in enumerate(expected["task_state"]):
        if _key_of(row, "task_state") == held:
            # Airflow's value and time, version 1 (no meta row), no try: as our API read it on 3.3.
            expected["task_state"][position] = (*row[:6], HELD_VALUE, airflows[8], None, 1, None)
    # (Compared decoded: the COPIED key comes back with the text of Airflow's copy.)
    assert _decoded(down["task_state"], 6) == _decoded(expected["task_state"], 6)
    assert _decoded(down["asset_state"], 2) == _decoded(expected["asset_state"], 2)
    # Airflow 3.2's airflow-task-state reads them all, as it wrote them.
    for item, read in zip(deployment.expected["task"], read_32["ours"]["task"], strict=True):
        if (item["task_id"], item["map_index"], item["key"]) == HELD:
            assert (read["value"], read["version"], read["updated_by_try"]) == (HELD_VALUE, 1, None)
        else:
            assert _as_read(read) == _as_read(item), item
    assert [_as_read(read) for read in read_32["ours"]["asset"]] == [
        _as_read(item) for item in deployment.expected["asset"]
    ]

    with phase(f"{kind}: 3.3 airflow db migrate (the upgrade again)"):
        status, output = deployment.airflow33("upgrade again", "db", "migrate")
    assert status == 0, output[-3000:]
    again = contents(deployment.url, *OURS, *META, *AIRFLOWS)

    # Airflow's tables are new, and so are the ids of task_state_store; the rows are what they were.
    def without_ids(rows: list[tuple]) -> list[tuple]:
        return sorted((row[1:] for row in rows), key=lambda row: row[:4])

    assert without_ids(again["task_state_store"]) == without_ids(migrated["task_state_store"])
    assert again["asset_state_store"] == migrated["asset_state_store"]
    assert again["asset_state_meta"] == migrated["asset_state_meta"]
    assert len(again["task_state_meta"]) == len(migrated["task_state_meta"]) + 1  # the held key's
    if kind == "mysql":
        assert again["task_state"] == [
            row for row in migrated["task_state"] if _key_of(row, "task_state") != held
        ]
        assert again["asset_state"] == migrated["asset_state"]
    else:
        assert again["task_state"] is None and again["asset_state"] is None


def _decoded(rows: list[tuple], value_at: int) -> list[tuple]:
    return [(*row[:value_at], json.loads(row[value_at]), *row[value_at + 1 :]) for row in rows]


# --- 6. the same DAG runs on -------------------------------------------------------------------------


def test_the_task_that_lost_its_worker_on_32_reconnects_when_33_runs_it(deployment: Deployment):
    """Through our API in the task, and Airflow 3.3's own accessor beside it. Cost: one 3.3 task run."""
    if deployment.db_kind != "sqlite":
        pytest.skip("the DAG ran on 3.2 in the SQLite pass only")
    with phase("sqlite: 3.3 tasks test run_job"):
        status, output = deployment.airflow33(
            "task", "tasks", "test", DAG_ID, "run_job", deployment.expected["run_id"]
        )
    assert status == 0, output[-4000:]
    [job] = [path.stem for path in deployment.jobs.glob("*.submitted")]  # no second job
    assert "Reconnect" in output, output[-4000:]
    assert f"Airflow's own accessor reads remote_job_id={job}" in output, output[-4000:]
    assert len((deployment.jobs / f"{job}.checks").read_text().splitlines()) == 2
