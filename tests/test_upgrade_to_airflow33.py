"""
The upgrade to Airflow 3.3, proven with both Airflow versions on one database of the test's own.

1. Airflow 3.2 with this project (this venv): ``airflow db migrate``; a real run of a resumable
   task whose worker is lost right after it stored ``remote_job_id`` (the run fails, the id stays);
   real mapped task instances and assets with state; then many more keys written by server code
   (tests/upgrade_scripts/fill_state_32.py), some expiring later, some already expired.
2. Airflow 3.3.2 (a second venv, ``state_testing.airflow33``): ``airflow db migrate`` on the same
   database, ``airflow-state-upgrade --dry-run``, then the real run, then a second run.
3. Airflow 3.3's own code reads every key back equal (its configured backend), and the lost task,
   retried by Airflow 3.3, reconnects to its job through ``context["task_state_store"]``.
4. A second run changes nothing, a dry run changes nothing, a conflict is reported and kept until
   ``--overwrite``, and ``--drop-old-tables`` drops our tables only once everything moved.

Module-scoped: one database, one 3.2 set-up, one 3.3 migration, shared by every test; the tests
run in file order (the later ones change the database). ``pytest -s`` prints the timings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow_shared.state import COMMIT_RECORDS_TASK_ID
from sqlalchemy import MetaData, Table, create_engine, inspect, select, text, update
from sqlalchemy.pool import NullPool
from state_testing import dbservers
from state_testing.airflow33 import Airflow33, airflow33
from state_testing.airflow_cli import run_checked

UPGRADE_DAGS = Path(__file__).parent / "dags" / "upgrade"
SCRIPTS = Path(__file__).parent / "upgrade_scripts"
AIRFLOW_32 = Path(sys.executable).with_name("airflow")
SCOPE_FIELDS = ("dag_id", "run_id", "task_id", "map_index")
OUR_TABLES = ("task_state", "asset_state", "alembic_version_state")
THEIR_TABLES = ("task_state_store", "asset_state_store")

#: Seconds per phase, printed at the end of the module (pytest -s) and in the report.
TIMINGS: dict[str, float] = {}


@contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    TIMINGS[name] = round(time.monotonic() - started, 1)
    print(f"[upgrade timing] {name}: {TIMINGS[name]}s", flush=True)


@pytest.fixture(scope="module", autouse=True)
def _print_timings(db_kind: str) -> Iterator[None]:
    """The module's phases, timed, printed once it is done (pytest -s): CI's cost of the upgrade test."""
    yield
    print(f"\n[upgrade timing] database: {db_kind}")
    for name, seconds in TIMINGS.items():
        print(f"[upgrade timing] {name}: {seconds}s")


# --- the database of this module -----------------------------------------------------------------


@pytest.fixture(scope="module")
def database_url(db_kind: str, tmp_path_factory) -> Iterator[str]:
    """A database of this module's own (3.3's migrations never touch the session's database)."""
    # CI runs this module (about 6 minutes) on MariaDB only, where the move has the most to get
    # right (keys as VARBINARY, the real collation of 3.3's key column, rows it refuses); the
    # PostgreSQL and SQLite passes spend that time elsewhere. It passes on both too: run it there
    # with STATE_UPGRADE_TEST_DATABASES=postgres,sqlite (a comma list; default: mysql).
    wanted = os.environ.get("STATE_UPGRADE_TEST_DATABASES", "mysql").split(",")
    if db_kind not in wanted:
        pytest.skip(f"the upgrade runs on {', '.join(wanted)} here (STATE_UPGRADE_TEST_DATABASES)")
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
    """*table* as the database has it (quoting identifiers such as ``key`` for each dialect)."""
    return Table(table, MetaData(), autoload_with=connection)


def table_rows(url: str, table: str) -> list[tuple]:
    """Every row of *table*, every column, in primary-key order: to compare contents exactly."""
    with connect(url) as connection:
        found = reflected(connection, table)
        return [tuple(row) for row in connection.execute(select(found).order_by(*found.primary_key.columns))]


def table_names(url: str) -> set[str]:
    with connect(url) as connection:
        return set(inspect(connection).get_table_names())


# --- Airflow 3.2 (this venv) ----------------------------------------------------------------------


@dataclass
class Setup:
    url: str
    jobs: Path
    env32: dict[str, str]
    expected: dict[str, Any] = field(default_factory=dict)
    resumable_run_id: str = ""
    job_id: str = ""


def run32(env: dict[str, str], *command: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_checked(list(command), env=env, label="Airflow 3.2", check=check)


def dags_folder(home: Path) -> Path:
    folder = home / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    for path in UPGRADE_DAGS.glob("*.py"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def setup32(database_url: str, tmp_path_factory) -> Setup:
    """Airflow 3.2 with this project on the module's database: runs, task and asset state."""
    home = tmp_path_factory.mktemp("airflow32-home")
    jobs = tmp_path_factory.mktemp("remote-jobs")
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW__")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder(home)),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "UPGRADE_TEST_JOBS_DIR": str(jobs),
        }
    )
    setup = Setup(database_url, jobs, env)
    with phase("3.2: airflow db migrate"):
        run32(env, AIRFLOW_32, "db", "migrate")
    with phase("3.2: dags reserialize + 2 dag runs (dags test)"):
        run32(env, AIRFLOW_32, "dags", "reserialize")
        run32(env, AIRFLOW_32, "dags", "test", "upgrade_fill", "2026-01-01")
        lost = run32(env, AIRFLOW_32, "dags", "test", "upgrade_resumable", "2026-01-03", check=False)
    assert "simulated worker loss after storing" in lost.stdout + lost.stderr, lost.stdout[-3000:]
    [setup.job_id] = [path.stem for path in jobs.glob("*.submitted")]
    with connect(database_url) as connection:
        setup.resumable_run_id, state = connection.execute(
            text(
                "SELECT dr.run_id, ti.state FROM dag_run dr JOIN task_instance ti ON ti.dag_id = dr.dag_id "
                "AND ti.run_id = dr.run_id WHERE dr.dag_id = 'upgrade_resumable'"
            )
        ).one()
    assert state == "failed"
    with phase("3.2: fill task and asset state (server code)"):
        out = home / "expected.json"
        run32(env, sys.executable, SCRIPTS / "fill_state_32.py", out)
        setup.expected = json.loads(out.read_text(encoding="utf-8"))
    return setup


# --- Airflow 3.3 (the second venv) ---------------------------------------------------------------


@dataclass
class Upgrade:
    af33: Airflow33
    env: dict[str, str]
    #: Every ``airflow-state-upgrade`` run so far, by name: (exit status, JSON report, output).
    runs: dict[str, tuple[int, dict | None, str]] = field(default_factory=dict)
    #: Contents of 3.3's tables at moments of the chain, by name.
    snapshots: dict[str, dict[str, list[tuple]]] = field(default_factory=dict)

    def command(self, name: str, *args: str) -> tuple[int, dict | None, str]:
        result = self.af33.run("airflow-state-upgrade", *args, env=self.env, check=False)
        report = None
        if "json" in args:
            try:
                report = json.loads(result.stdout)
            except ValueError:
                report = None
        self.runs[name] = (result.returncode, report, result.stdout + result.stderr)
        return self.runs[name]


def snapshot(url: str) -> dict[str, list[tuple]]:
    return {table: table_rows(url, table) for table in THEIR_TABLES}


@pytest.fixture(scope="module")
def upgrade(setup32: Setup, tmp_path_factory) -> Upgrade:
    """3.3 migrates the database; the command runs: dry run, real run, second run."""
    with phase("3.3: venv (build or reuse, reinstall this repo's distributions)"):
        af33 = airflow33()
    TIMINGS["3.3: venv build (0 = cached)"] = round(af33.build_seconds, 1)
    home = tmp_path_factory.mktemp("airflow33-home")
    dags_folder(home)
    env = af33.env(setup32.url, home, UPGRADE_TEST_JOBS_DIR=str(setup32.jobs))
    upgrade = Upgrade(af33, env)
    with phase("3.3: airflow db migrate"):
        af33.run("airflow", "db", "migrate", env=env)
    upgrade.snapshots["migrated"] = snapshot(setup32.url)
    with phase("3.3: airflow-state-upgrade --dry-run"):
        upgrade.command("dry run", "--dry-run", "-o", "json")
    upgrade.snapshots["after dry run"] = snapshot(setup32.url)
    with phase("3.3: airflow-state-upgrade (first run)"):
        upgrade.command("first", "-o", "json")
    upgrade.snapshots["after first run"] = snapshot(setup32.url)
    with phase("3.3: airflow-state-upgrade (second run)"):
        upgrade.command("second", "-o", "json")
    upgrade.snapshots["after second run"] = snapshot(setup32.url)
    return upgrade


def read_back_33(upgrade: Upgrade, setup: Setup) -> dict:
    """What Airflow 3.3's own backend reads for every expected key (tests/upgrade_scripts)."""
    path = Path(upgrade.env["AIRFLOW_HOME"]) / "expected.json"
    path.write_text(json.dumps(setup.expected, ensure_ascii=False), encoding="utf-8")
    result = upgrade.af33.run("python", SCRIPTS / "read_state_33.py", path, env=upgrade.env)
    return json.loads(result.stdout)


# --- 1. what Airflow 3.2 left ---------------------------------------------------------------------


def test_airflow_32_left_task_and_asset_state_of_every_kind(setup32: Setup):
    task, asset = setup32.expected["task"], setup32.expected["asset"]
    [job] = [item for item in task if item["key"] == "remote_job_id"]
    assert (job["dag_id"], job["run_id"], job["value"]) == (
        "upgrade_resumable",
        setup32.resumable_run_id,
        setup32.job_id,
    )
    assert {item["map_index"] for item in task if item["task_id"] == "process"} == {0, 1, 2}
    assert len({(item["dag_id"], item["run_id"]) for item in task}) == 2
    assert len({item["asset_id"] for item in asset}) == 3
    assert any(len(json.dumps(item["value"], ensure_ascii=False)) >= 65534 for item in task)
    assert any(item["expires_at"] for item in task) and any(item["expires_at"] for item in asset)
    assert len(task) > 400, len(task)


# --- 2. the command on Airflow 3.3 ------------------------------------------------------------------


def test_dry_run_reports_what_would_move_and_writes_nothing(upgrade: Upgrade, setup32: Setup, db_kind: str):
    status, report, output = upgrade.runs["dry run"]
    assert report is not None, output
    assert report["dry_run"] is True
    assert report["tables"]["task_state"]["moved"] == len(setup32.expected["task"])
    assert report["tables"]["asset_state"]["moved"] == len(setup32.expected["asset"])
    assert (
        upgrade.snapshots["after dry run"] == upgrade.snapshots["migrated"] == {t: [] for t in THEIR_TABLES}
    )
    assert status == 0, output


def test_first_run_moves_every_live_row_and_skips_expired(upgrade: Upgrade, setup32: Setup, db_kind: str):
    status, report, output = upgrade.runs["first"]
    assert report is not None, output
    expected_task = setup32.expected["task"]
    expected_asset = setup32.expected["asset"]
    task, asset = report["tables"]["task_state"], report["tables"]["asset_state"]
    assert task["expired"] == len(setup32.expected["expired"]["task"])
    assert asset["expired"] == len(setup32.expected["expired"]["asset"])
    # Records of staged commits are ours alone: Airflow 3.3 has no use for them.
    assert task["commit_records"] == setup32.expected["commit_records"] > 0
    assert task["read"] == len(expected_task) + task["expired"] + task["commit_records"]
    assert asset["read"] == len(expected_asset) + asset["expired"]
    assert task["moved"] == len(setup32.expected["task"])
    assert asset["moved"] == len(setup32.expected["asset"])
    assert (task["conflicts"], task["overwritten"], asset["conflicts"], asset["overwritten"]) == (0, 0, 0, 0)
    # Every key of the corpus fits 3.3's tables on every database here (MariaDB keeps emoji keys too).
    assert report["unmovable"] == [], report["unmovable"]
    assert status == 0, output
    rows = upgrade.snapshots["after first run"]
    assert len(rows["task_state_store"]) == task["moved"]
    assert len(rows["asset_state_store"]) == asset["moved"]


# --- 3. Airflow 3.3's own code reads it all ---------------------------------------------------------


def _iso(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def test_airflow_33_reads_every_key_back_equal(upgrade: Upgrade, setup32: Setup, db_kind: str):
    read = read_back_33(upgrade, setup32)
    assert read["backend"] == "airflow_task_state.metastore.MetastoreBackend"
    wrong = []
    for item, (value, row) in zip(setup32.expected["task"], read["task"], strict=True):
        if value is None or json.loads(value) != item["value"]:
            wrong.append(
                (
                    item["dag_id"],
                    item["run_id"],
                    item["task_id"],
                    item["map_index"],
                    item["key"],
                    value and value[:80],
                )
            )
            continue
        # The key as stored (a charset that cannot hold it would store "?" and still match the lookup).
        assert row["key"] == item["key"]
        # Stored as 3.3's Execution API stores a value, so 3.3's own reads and writes agree.
        assert row["value"] == json.dumps(item["value"]), item["key"]
        assert _iso(row["updated_at"]) == _iso(item["updated_at"]), item["key"]
        assert _iso(row["expires_at"]) == _iso(item["expires_at"]), item["key"]
    for item, (value, row) in zip(setup32.expected["asset"], read["asset"], strict=True):
        if value is None or json.loads(value) != item["value"]:
            wrong.append((item["asset_id"], item["key"], value and value[:80]))
            continue
        assert row["key"] == item["key"]
        assert row["value"] == json.dumps(item["value"]), item["key"]
        assert _iso(row["updated_at"]) == _iso(item["updated_at"]), item["key"]
        assert row["writer"] == expected_writer_33(item["writer"]), item["key"]
    assert wrong == []
    assert read["expired"]["task"] == [None] * len(setup32.expected["expired"]["task"])
    assert read["expired"]["asset"] == [None] * len(setup32.expected["expired"]["asset"])


def expected_writer_33(ours: dict | None) -> dict:
    """The contract: a task writer keeps its task instance; the API and the CLI become 'api'."""
    nobody = {"dag_id": None, "run_id": None, "task_id": None, "map_index": None}
    if ours is None:
        return {"kind": None, **nobody}
    if ours["kind"] == "task":
        return {"kind": "task", **{name: ours[name] for name in nobody}}
    return {"kind": "api", **nobody}


def test_asset_keys_of_every_writer_and_an_expiring_one_moved(setup32: Setup):
    """The asset rows the test above checks cover each kind of writer and an expiry."""
    kinds = {item["writer"]["kind"] for item in setup32.expected["asset"] if item["writer"]}
    assert kinds == {"task", "api", "cli"}
    assert any(item["key"] == "ttl/five days" and item["expires_at"] for item in setup32.expected["asset"])


# --- 4. running it again, and the retried task ------------------------------------------------------


def test_second_run_changes_nothing(upgrade: Upgrade, db_kind: str):
    status, report, output = upgrade.runs["second"]
    assert report is not None, output
    first = upgrade.runs["first"][1]
    for table in ("task_state", "asset_state"):
        counts = report["tables"][table]
        assert counts["moved"] == counts["overwritten"] == counts["conflicts"] == 0, counts
        assert counts["unchanged"] == first["tables"][table]["moved"], counts
    assert upgrade.snapshots["after second run"] == upgrade.snapshots["after first run"]
    assert status == (1 if report["unmovable"] else 0), output


def test_task_lost_on_32_reconnects_to_its_job_when_retried_on_33(
    upgrade: Upgrade, setup32: Setup, db_kind: str
):
    env = {**upgrade.env, "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO"}
    with phase("3.3: dags reserialize + tasks test (retry)"):
        upgrade.af33.run("airflow", "dags", "reserialize", env=env)
        result = upgrade.af33.run(
            "airflow",
            "tasks",
            "test",
            "upgrade_resumable",
            "run_job",
            setup32.resumable_run_id,
            env=env,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert [path.stem for path in setup32.jobs.glob("*.submitted")] == [setup32.job_id], (
        "a second job was submitted"
    )
    # Two status queries of the same job: the reconnect decision, then the poll that saw it finish.
    assert len((setup32.jobs / f"{setup32.job_id}.checks").read_text().splitlines()) == 2
    assert "Reconnecting to existing job" in output, output[-4000:]
    with connect(setup32.url) as connection:
        state = connection.execute(
            text("SELECT state FROM task_instance WHERE dag_id = 'upgrade_resumable' AND run_id = :r"),
            {"r": setup32.resumable_run_id},
        ).scalar_one()
    assert state == "success"


# --- failures on the way: a killed run, refusals, keys 3.3's table cannot tell apart --------------

MARKER_TABLE = "airflow_state_upgrade"


def live_values(upgrade: Upgrade, setup: Setup) -> list:
    read = read_back_33(upgrade, setup)
    return [json.loads(value) if value is not None else None for value, _ in read["task"] + read["asset"]]


def forget_the_move(url: str) -> None:
    """3.3's tables emptied and the completion marker gone: the database as before the first run."""
    with connect(url) as connection:
        for table in THEIR_TABLES:
            connection.execute(reflected(connection, table).delete())
        if inspect(connection).has_table(MARKER_TABLE):
            reflected(connection, MARKER_TABLE).drop(connection)


def test_a_run_killed_midway_is_finished_by_the_next_and_keys_deleted_after_the_move_stay_deleted(
    upgrade: Upgrade, setup32: Setup
):
    forget_the_move(setup32.url)
    live = upgrade.runs["first"][1]["tables"]["task_state"]["moved"]
    # One row per transaction, SIGKILL after 30 of them: a process killed between two commits.
    command = [str(upgrade.af33.bin("airflow-state-upgrade")), "--batch-size", "1"]
    process = subprocess.Popen(
        command, env=upgrade.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    progress = 0
    for line in process.stderr:
        progress += line.startswith("task_state: ")
        if progress == 30:
            process.kill()
            break
    process.wait(timeout=60)
    assert process.returncode == -9, "the run ended before it could be killed"
    with connect(setup32.url) as connection:
        partial = connection.execute(text("SELECT count(*) FROM task_state_store")).scalar_one()
        assert not inspect(connection).has_table(MARKER_TABLE), "an interrupted move counts as complete"
    assert 0 < partial < live  # (some of the 30 rows read were expired: not moved)

    status, report, output = upgrade.command("after kill", "-o", "json")
    assert status == 0, output
    task = report["tables"]["task_state"]
    assert (task["unchanged"], task["moved"]) == (partial, live - partial), output
    assert live_values(upgrade, setup32) == [
        i["value"] for i in setup32.expected["task"] + setup32.expected["asset"]
    ]

    # The move is complete: a key a 3.3 task deletes now is not brought back by another run.
    item = next(i for i in setup32.expected["task"] if i["task_id"] == "process" and i["key"] == "checkpoint")
    with connect(setup32.url) as connection:
        rows = reflected(connection, "task_state_store")
        connection.execute(rows.delete().where(*_task_row_filter(rows, item)))
    status, report, output = upgrade.command("after delete", "-o", "json")
    assert status == 0, output
    assert report["tables"]["task_state"]["deleted_in_airflow33"] == 1, output
    assert report["tables"]["task_state"]["moved"] == 0, output
    with pytest.raises(Exception, match="No row was found"):
        stored_33(upgrade, item)

    # Without the marker (a database where the move never completed) the key moves again.
    with connect(setup32.url) as connection:
        reflected(connection, MARKER_TABLE).drop(connection)
    status, report, output = upgrade.command("restore", "-o", "json")
    assert (status, report["tables"]["task_state"]["moved"]) == (0, 1), output
    assert stored_33(upgrade, item) == item["value"]


def test_refuses_to_start_without_33s_tables_or_on_a_schema_of_ours_it_does_not_read(
    upgrade: Upgrade, setup32: Setup, tmp_path: Path
):
    empty = {**upgrade.env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'empty.db'}"}
    result = upgrade.af33.run("airflow-state-upgrade", env=empty, check=False)
    assert result.returncode == 2, result.stderr
    assert "Run `airflow db migrate` with Airflow 3.3 first" in result.stderr

    before = snapshot(setup32.url)
    with connect(setup32.url) as connection:
        version = reflected(connection, "alembic_version_state")
        head = connection.execute(select(version.c.version_num)).scalar_one()
        connection.execute(update(version).values(version_num="b7d3e1a90112"))
    try:
        status, _, output = upgrade.command("0.1.0 schema", "-o", "json")
    finally:
        with connect(setup32.url) as connection:
            connection.execute(
                update(reflected(connection, "alembic_version_state")).values(version_num=head)
            )
    assert status == 2, output
    assert "airflow-task-state 0.1.0" in output and "upgrade airflow-task-state to 0.2 or later" in output
    assert snapshot(setup32.url) == before


def test_keys_that_33s_key_column_cannot_tell_apart_are_refused_with_the_reason(
    upgrade: Upgrade, setup32: Setup, db_kind: str
):
    """
    Ours keeps keys as bytes on MariaDB; 3.3's key column there has the database's collation
    (utf8mb4_unicode_ci here), under which "Retry-Count" and "retry-count" are the same key. One
    moves, the other is refused with the reason and stays in ours; elsewhere both move.
    """
    keys = ("Retry-Count", "retry-count")
    with connect(setup32.url) as connection:
        ours = reflected(connection, "task_state")
        scope = connection.execute(  # a task instance's state, not a run's commit records
            select(ours.c.dag_run_id, ours.c.dag_id, ours.c.run_id, ours.c.task_id, ours.c.map_index)
            .where(ours.c.task_id != COMMIT_RECORDS_TASK_ID)
            .limit(1)
        ).one()
        now = datetime.now(UTC).replace(tzinfo=None)
        for key in keys:
            connection.execute(
                ours.insert().values(
                    **scope._asdict(),
                    key=key.encode() if db_kind == "mysql" else key,
                    value="1",
                    updated_at=now,
                    updated_by_try=1,
                    version=1,
                    expires_at=None,
                )
            )
        reflected(connection, MARKER_TABLE).drop(connection)  # these keys are new: not "deleted in 3.3"
    try:
        status, report, output = upgrade.command("collision", "-o", "json")
        task = report["tables"]["task_state"]
        if db_kind == "mysql":
            assert status == 1, output
            assert (task["moved"], task["unmovable"]) == (1, 1), output
            [refused] = report["unmovable"]
            assert refused["key"] in keys and "collation utf8mb4_unicode_ci" in refused["reason"], refused
            assert "--drop-old-tables" not in output
        else:
            assert (status, task["moved"], task["unmovable"]) == (0, 2, 0), output
    finally:
        with connect(setup32.url) as connection:
            for table in ("task_state", "task_state_store"):
                rows = reflected(connection, table)
                stored = [
                    key.encode() if table == "task_state" and db_kind == "mysql" else key for key in keys
                ]
                connection.execute(rows.delete().where(rows.c.key.in_(stored)))
    status, report, output = upgrade.command("after collision", "-o", "json")
    assert status == 0 and not report["unmovable"], output


# --- conflicts, --overwrite and --drop-old-tables (they change the database: last) -----------------


def test_a_key_33_rewrote_is_kept_and_an_older_different_one_is_a_conflict_until_overwrite(
    upgrade: Upgrade, setup32: Setup
):
    """
    A value a 3.3 task wrote after ours is the current one: kept, even with --overwrite. A different
    value 3.3 held from before ours was written is a conflict: reported and kept (exit 1), our
    tables cannot be dropped meanwhile, and --overwrite replaces it with ours.
    """
    item = next(i for i in setup32.expected["task"] if i["task_id"] == "process" and i["key"] == "checkpoint")
    where = [item["dag_id"], item["run_id"], item["task_id"], str(item["map_index"])]
    theirs = {"written": "by Airflow 3.3"}
    upgrade.af33.run(
        "python", SCRIPTS / "write_state_33.py", *where, "checkpoint", json.dumps(theirs), env=upgrade.env
    )
    status, report, output = upgrade.command("newer", "--overwrite", "-o", "json")
    assert status == 0, output
    assert report["tables"]["task_state"]["newer_in_airflow33"] == 1, output
    assert report["tables"]["task_state"]["overwritten"] == 0, output
    assert stored_33(upgrade, item) == theirs

    # The same value, but written (as far as the row says) before ours.
    set_updated_at_33(upgrade, item, datetime.fromisoformat(item["updated_at"]) - timedelta(hours=1))
    status, report, output = upgrade.command("conflict", "-o", "json")
    assert status == 1, output
    assert report["tables"]["task_state"]["conflicts"] == 1
    [conflict] = report["conflicts"]
    assert (conflict["table"], conflict["key"]) == ("task_state", "checkpoint")
    assert stored_33(upgrade, item) == theirs

    status, report, output = upgrade.command("drop refused", "--drop-old-tables", "-y", "-o", "json")
    assert status != 0, output
    assert set(OUR_TABLES) <= table_names(setup32.url), "our tables were dropped while a conflict remained"

    status, report, output = upgrade.command("overwrite", "--overwrite", "-o", "json")
    assert report["tables"]["task_state"]["overwritten"] == 1, output
    # The conflict is still listed (what was replaced), but no longer fails the run.
    assert status == 0, output
    assert stored_33(upgrade, item) == item["value"]


def _task_row_filter(rows: Table, item: dict) -> list:
    return [rows.c[name] == item[name] for name in (*SCOPE_FIELDS, "key")]


def set_updated_at_33(upgrade: Upgrade, item: dict, moment: datetime) -> None:
    with connect(upgrade.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]) as connection:
        rows = reflected(connection, "task_state_store")
        naive_utc = moment.astimezone(UTC).replace(tzinfo=None)
        connection.execute(update(rows).where(*_task_row_filter(rows, item)).values(updated_at=naive_utc))


def stored_33(upgrade: Upgrade, item: dict) -> Any:
    """The value of the task-state key *item* in 3.3's table, decoded."""
    with connect(upgrade.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]) as connection:
        rows = reflected(connection, "task_state_store")
        query = select(rows.c.value).where(*_task_row_filter(rows, item))
        return json.loads(connection.execute(query).scalar_one())


def test_drop_old_tables_after_a_clean_run_and_33_still_reads_everything(
    upgrade: Upgrade, setup32: Setup, db_kind: str
):
    status, report, output = upgrade.command("drop", "--drop-old-tables", "-y", "-o", "json")
    assert status == 0, output
    assert set(OUR_TABLES) <= set(report["dropped"]), report["dropped"]
    assert not set(OUR_TABLES) & table_names(setup32.url)
    expected = setup32.expected["task"] + setup32.expected["asset"]
    assert live_values(upgrade, setup32) == [item["value"] for item in expected]
