"""
MySQL's write path: MySQL 8 has no ``INSERT ... RETURNING`` (among MySQL-dialect servers only
MariaDB 10.5+ has it), so on MySQL every write hands back its version through ``LAST_INSERT_ID``
instead. No MySQL 8 server can be installed here, so the path is forced on MariaDB (``--db mysql``),
which runs the same statements: the whole conformance kit, and the write path of the contention tests
(``test_metastore_contention.py``). What no MariaDB run can show, that no statement of the path uses
syntax MySQL 8 lacks, is checked on the SQL itself, as MySQL's dialect compiles it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import test_metastore_conformance
from airflow_shared.state import AssetScope, TaskScope
from sqlalchemy.dialects import mysql, postgresql, sqlite

# The metastore's own tests of writes in a caller's session (what the CLI's import and staged
# commits rely on), run again here with this module's ``backend``: the MySQL path's.
from test_metastore import (  # noqa: F401
    scope,
    test_a_callers_session_is_joined_and_not_committed,
    test_a_refused_increment_leaves_no_trace_on_the_connection,
    test_a_write_while_running_writes_only_while_its_try_runs,
    test_an_increment_while_running_adds_only_while_its_try_runs,
    test_batches_join_a_callers_session_and_roll_back_with_it,
    test_conditional_writes_and_increments_join_a_callers_session,
)


@pytest.fixture
def on_mariadb(db_kind: str) -> None:
    if db_kind != "mysql":
        pytest.skip("the MySQL write path runs on MariaDB: --db mysql")


@pytest.mark.usefixtures("on_mariadb")
class TestLastInsertIdPathConformance(test_metastore_conformance.TestMetastoreConformance):
    """The shared kit, every write through the statements MySQL 8 gets."""

    @pytest.fixture
    def backend(self):
        from airflow_task_state.metastore import MetastoreStateBackend

        return MetastoreStateBackend(write_path="last_insert_id")

    # Not run again here: kit tests whose subject sends the same SQL on both paths (reads,
    # listings, deletes, clears, clean-up) or none at all (input refused before any SQL). Their
    # writes are plain sets, which every other test of the kit runs through this path.
    test_bad_keys_are_refused_everywhere = None
    test_wrong_scope_types_are_refused = None
    test_increment_refuses_a_by_that_is_not_an_int = None
    test_entries_refuse_bad_arguments = None
    test_get_and_delete_many_refuse_bad_keys_and_delete_nothing = None
    test_discard_written_through_try_refuses_bad_input = None
    test_missing_key_reads_as_none_and_deleting_or_clearing_is_no_error = None
    test_get_many_returns_only_the_keys_that_hold_a_value = None
    test_keys_and_entries_list_exactly_this_scope_sorted = None
    test_entries_filter_by_prefix_and_page = None
    test_key_counts_count_each_scope = None
    test_delete_removes_only_that_key = None
    test_delete_many_removes_only_the_keys_named = None
    test_clear_clears_only_that_scope = None
    test_clear_all_map_indices_clears_the_task_in_that_run_only = None
    test_clear_all_map_indices_in_a_recreated_run_touches_nothing_else = None
    test_discard_written_through_try_removes_only_those_tries_keys = None
    test_cleanup_removes_only_expired_keys_and_dry_run_nothing = None
    test_cleanup_removes_keys_last_written_before_updated_before = None
    test_async_capabilities_match_sync = None


# --- what the path sends: statements MySQL 8.0 has ----------------------------------------------


def _mysql_statements() -> dict[str, str]:
    """Every write of the ``last_insert_id`` path, compiled by SQLAlchemy's MySQL dialect."""
    from airflow_task_state.metastore import statements

    dialect = mysql.dialect()
    compiled = {}
    for of_type in (TaskScope("d", "r", "t"), AssetScope(1)):
        kind = type(of_type).__name__
        sql = statements.for_scope(of_type, "last_insert_id")
        for name in ("upsert", "create", "increment", "update_if_version"):
            compiled[f"{kind}.{name}"] = str(getattr(sql, name).compile(dialect=dialect))
        for size in (1, 3, 300):
            pairs = {f"k{n}": "v" for n in range(size)}
            for what in ("upsert", "versions"):
                statement, _ = statements.batch(what, of_type, pairs, "last_insert_id")
                compiled[f"{kind}.batch_{what}_{size}"] = str(statement.compile(dialect=dialect))
    return compiled


@pytest.mark.any_database
@pytest.mark.parametrize("name", sorted(_mysql_statements()))
def test_the_mysql_path_uses_no_returning_and_no_session_variable(name):
    sql = _mysql_statements()[name]
    assert not re.search(r"\bRETURNING\b", sql, re.IGNORECASE), sql
    # Assigning user variables inside expressions is deprecated since MySQL 8.0.13.
    assert ":=" not in sql and "@" not in sql, sql


@pytest.mark.any_database
def test_the_mysql_path_compiles_for_mysql_only():
    from airflow_task_state.metastore import statements

    upsert = statements.for_scope(TaskScope("d", "r", "t"), "last_insert_id").upsert
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        with pytest.raises(NotImplementedError, match="last_insert_id write path is MySQL's"):
            upsert.compile(dialect=dialect)


@pytest.mark.any_database
@pytest.mark.parametrize(
    ("url", "server", "mariadb", "expected"),
    [
        ("mysql+mysqldb://u@h/d", (8, 0, 36), False, "last_insert_id"),
        ("mysql+mysqldb://u@h/d", (8, 4, 3), False, "last_insert_id"),
        ("mysql://u@h/d", (8, 0, 11), False, "last_insert_id"),
        ("mysql+pymysql://u@h/d", (9, 1, 0), False, "last_insert_id"),
        ("mysql+mysqldb://u@h/d", (10, 4, 32), True, "last_insert_id"),
        ("mysql+mysqldb://u@h/d", (10, 5, 0), True, "returning"),
        ("mysql+mysqldb://u@h/d", (11, 4, 2), True, "returning"),
        ("postgresql+psycopg2://u@h/d", (16, 4), False, "returning"),
        ("sqlite:///x.db", (3, 45, 1), False, "returning"),
    ],
)
def test_the_write_path_follows_the_server_the_dialect_reports(url, server, mariadb, expected):
    """What SQLAlchemy's dialect learns from the server on connecting picks the path, not configuration."""
    from airflow_task_state.metastore.operations import write_path
    from sqlalchemy import create_engine

    dialect = create_engine(url).dialect
    dialect.server_version_info = server
    if dialect.name == "mysql":
        dialect.is_mariadb = mariadb
    assert write_path(dialect) == expected


@pytest.mark.any_database
def test_a_write_path_not_known_is_refused_with_the_choices():
    from airflow_task_state.metastore import MetastoreStateBackend

    with pytest.raises(ValueError, match="returning, last_insert_id, or None to follow the server"):
        MetastoreStateBackend(write_path="insert_returning")  # type: ignore[arg-type]


def test_the_server_of_the_run_picks_its_path(db_kind):
    """MariaDB 10.5+ (the run's) keeps RETURNING: one statement whose reply has the row."""
    from airflow_task_state.airflow_db.engine import autocommit_engine
    from airflow_task_state.metastore.operations import _autocommit_dialect, write_path

    dialect = _autocommit_dialect()
    assert dialect is autocommit_engine().dialect
    assert write_path(dialect) == "returning"


# --- the path's own cases, beyond the kit ---------------------------------------------------------


@pytest.fixture
def mysql_path_backend(on_mariadb):
    from airflow_task_state.metastore import MetastoreStateBackend

    return MetastoreStateBackend(write_path="last_insert_id")


@pytest.fixture
def backend(mysql_path_backend):
    """What the tests imported from ``test_metastore`` run on."""
    return mysql_path_backend


@pytest.fixture
def task(make_dag_run, unique) -> TaskScope:
    make_dag_run(f"dag_{unique}", "run")
    return TaskScope(f"dag_{unique}", "run", "task")


def test_increments_hand_back_negative_and_64_bit_results(mysql_path_backend, task):
    """LAST_INSERT_ID is unsigned: the sign of a counter survives the trip."""
    backend = mysql_path_backend
    assert backend.increment(task, "n", -5) == -5  # inserted
    assert backend.increment(task, "n", -3) == -8  # updated
    assert backend.increment(task, "n", 8) == 0
    backend.set(task, "n", str(-(2**63) + 1))
    assert backend.increment(task, "n", -1) == -(2**63)
    backend.set(task, "n", str(2**63 - 2))
    assert backend.increment(task, "n", 1) == 2**63 - 1
    with pytest.raises(ValueError):
        backend.increment(task, "n", 1)  # leaves 64 bits: refused, nothing written
    assert backend.get(task, "n") == str(2**63 - 1)


def test_a_refused_increment_is_told_from_an_insert_by_one(mysql_path_backend, task):
    """An insert of 1 and a refusal both report one row: the version (1 or 0) tells them apart."""
    backend = mysql_path_backend
    backend.set(task, "text", "not a number")
    with pytest.raises(ValueError):
        backend.increment(task, "text", 1)
    assert backend.get_versioned(task, "text").version == 1
    assert backend.increment(task, "fresh", 1) == 1
    assert backend.get_versioned(task, "fresh").version == 1


def test_expired_keys_are_replaced_and_report_their_new_version(mysql_path_backend, task):
    from airflow_task_state.metastore.operations import _now

    backend = mysql_path_backend
    soon = _now() + timedelta(milliseconds=300)
    assert backend.write(task, "lease", "a", expires_at=soon) == 1
    assert backend.write(task, "lease", "b", expires_at=soon) == 2
    backend.set(task, "count", "41")
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    while backend.get(task, "lease") is not None:
        assert datetime.now(UTC) < deadline
    assert backend.write(task, "lease", "c", if_version=0) == 3  # created over the expired row
    assert backend.get_versioned(task, "lease").value == "c"


def test_a_batch_hands_back_each_version_in_a_callers_session(mysql_path_backend, task):
    from airflow.utils.session import create_session

    backend = mysql_path_backend
    backend.set(task, "a", "1")
    with create_session() as session:
        assert backend.set_many(task, {"a": "2", "b": "2"}, session=session) == {"a": 2, "b": 1}
        assert backend.set_many(task, {"a": "3"}, session=session) == {"a": 3}
    assert backend.get_many(task, ["a", "b"]) == {"a": "3", "b": "2"}


def test_a_batch_for_a_missing_run_writes_nothing(mysql_path_backend):
    missing = TaskScope("no_such_dag", "no_such_run", "task")
    with pytest.raises(ValueError, match="No DagRun found"):
        mysql_path_backend.set_many(missing, {"a": "1"})
