"""What the metastore backend promises beyond the shared contract."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from dataclasses import astuple

import pytest
from airflow_shared.state import CLI_WRITER, AssetScope, StateCapabilityError, TaskScope
from sqlalchemy import delete, event, select

# Tests of the 3.2 metastore's own tables (task_state, asset_state) and of its one-statement writes;
# on Airflow 3.3 the rows are Airflow's, with meta rows beside them, written in one transaction.
only_airflow32 = pytest.mark.only_airflow32


@contextmanager
def statements_on(engine):
    """
    Collect the SQL statements *engine* sends while the block runs, but the time zone set on each
    new async connection on MySQL (test_metastore_times_on_mysql.py proves it).
    """
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if not statement.startswith("SET time_zone"):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def sql_on_the_event_loop(statement) -> str:
    """
    The SQL of *statement* (or of a tuple of statements, one transaction) as the API server's event
    loop sends it: PostgreSQL's, through asyncpg.
    """
    from sqlalchemy.dialects.postgresql import asyncpg

    every = statement if isinstance(statement, tuple) else (statement,)
    return "; ".join(str(each.compile(dialect=asyncpg.dialect())) for each in every)


@contextmanager
def autocommit_statements():
    """
    Collect the SQL that calls without a session send (they bypass SQLAlchemy's cursor events), in
    a thread or on the API server's event loop.
    """
    from airflow_task_state.airflow_db import event_loop
    from airflow_task_state.airflow_db.engine import _AutocommitEngine

    seen: list[str] = []
    run, run_on_loop = _AutocommitEngine._run, event_loop.execute

    def recording_run(self, compiled, *arguments):
        seen.append(compiled.sql)
        return run(self, compiled, *arguments)

    async def recording_run_on_loop(statement, values):
        seen.append(sql_on_the_event_loop(statement))
        return await run_on_loop(statement, values)

    _AutocommitEngine._run, event_loop.execute = recording_run, recording_run_on_loop
    try:
        yield seen
    finally:
        _AutocommitEngine._run, event_loop.execute = run, run_on_loop


@pytest.fixture
def scope(make_dag_run, unique):
    make_dag_run(f"dag_{unique}", "run_1")
    return TaskScope(f"dag_{unique}", "run_1", "task")


def stored_rows(table):
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.execute(select(table.__table__)).all()


def set_in_a_session(backend, scope, key, value):
    from airflow.utils.session import create_session

    with create_session() as session:
        backend.set(scope, key, value, session=session)


@only_airflow32
def test_set_without_a_dag_run_fails_and_writes_nothing(backend, unique):
    from airflow_task_state.metastore.models import TaskStateModel

    orphan = TaskScope(f"dag_{unique}", "no_such_run", "task")
    with pytest.raises(ValueError, match="No DagRun found"):
        backend.set(orphan, "k", "v")
    with pytest.raises(ValueError, match="No DagRun found"):
        set_in_a_session(backend, orphan, "k", "v")
    with pytest.raises(ValueError, match="No DagRun found"):
        asyncio.run(backend.aset(orphan, "k", "v"))
    assert not [r for r in stored_rows(TaskStateModel) if r.dag_id == orphan.dag_id]


def test_set_without_an_asset_fails(backend):
    with pytest.raises(ValueError, match="No asset found with id 987654"):
        backend.set(AssetScope(987654), "k", "v")
    with pytest.raises(ValueError, match="No asset found with id 987654"):
        set_in_a_session(backend, AssetScope(987654), "k", "v")
    with pytest.raises(ValueError, match="No asset found with id 987654"):
        asyncio.run(backend.aset(AssetScope(987654), "k", "v"))


def test_rewriting_the_same_value_is_not_mistaken_for_a_missing_dag_run(backend, scope):
    # The upsert reports a missing dag run as "no row written"; an update to an equal value must
    # still count as written, in every path.
    for _ in range(2):
        backend.set(scope, "k", "same")
        set_in_a_session(backend, scope, "k", "same")
        asyncio.run(backend.aset(scope, "k", "same"))
    assert backend.get(scope, "k") == "same"


@only_airflow32
def test_set_is_one_statement_that_finds_the_dag_run_itself(backend, scope):
    with autocommit_statements() as seen:
        backend.set(scope, "remote_job_id", "app_001")
    assert len(seen) == 1, seen
    assert seen[0].lstrip().upper().startswith("INSERT INTO TASK_STATE")
    assert "dag_run" in seen[0]


@only_airflow32
def test_reads_and_deletes_are_one_statement(backend, scope):
    backend.set(scope, "k", "v")
    with autocommit_statements() as seen:
        backend.get(scope, "k")
        backend.delete(scope, "k")
        backend.clear(scope)
    assert len(seen) == 3, seen


def test_bad_input_never_reaches_the_database(backend, scope):
    with autocommit_statements() as seen:
        for call in (
            lambda: backend.set(scope, "", "v"),
            lambda: backend.set(scope, "k", None),
            lambda: backend.set("not a scope", "k", "v"),
            lambda: backend.get(scope, "k" * 513),
        ):
            with pytest.raises((TypeError, ValueError)):
                call()
    assert seen == []


@only_airflow32
def test_updated_by_try_and_updated_at_are_recorded(backend, scope):
    from airflow_task_state.metastore.models import TaskStateModel

    backend.set_by_try(scope, "k", "from try 2", try_number=2)
    (row,) = [r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id]
    assert (row.value, row.updated_by_try) == ("from try 2", 2)
    assert row.updated_at is not None and row.updated_at.tzinfo is not None
    first_write = row.updated_at

    backend.set(scope, "k", "from outside a task")
    (row,) = [r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id]
    assert (row.value, row.updated_by_try) == ("from outside a task", None)
    assert row.updated_at >= first_write


@only_airflow32
def test_async_writes_record_the_writing_try_too(backend, scope, make_asset):
    from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel

    asyncio.run(backend.aset_by_try(scope, "k", "from try 3", try_number=3))
    asyncio.run(backend.aset_by_try(scope, "other", "from outside a task", try_number=None))
    rows = {r.key: r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id}
    assert (rows["k"].value, rows["k"].updated_by_try) == ("from try 3", 3)
    assert rows["k"].updated_at.tzinfo is not None
    assert rows["other"].updated_by_try is None

    asyncio.run(backend.aset(scope, "k", "plain aset"))
    rows = {r.key: r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id}
    assert (rows["k"].value, rows["k"].updated_by_try) == ("plain aset", None)

    asset = AssetScope(make_asset(1))
    backend.set_by_try(asset, "watermark", "1", try_number=None)
    asyncio.run(backend.aset_by_try(asset, "cursor", "2", try_number=None))
    stored = {(r.asset_id, r.key): r.value for r in stored_rows(AssetStateModel)}
    assert stored[(asset.asset_id, "watermark")] == "1"
    assert stored[(asset.asset_id, "cursor")] == "2"


@only_airflow32
def test_orm_sessions_fill_updated_at_on_insert_and_update(make_dag_run, make_asset, unique):
    """Rows added through the ORM without updated_at get one, as Airflow's own models do."""
    from datetime import timedelta

    from airflow._shared.timezones import timezone
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel

    dag_run_id = make_dag_run(f"dag_{unique}", "run")
    asset_id = make_asset(1)
    before = timezone.utcnow()
    with create_session() as session:
        session.add(
            TaskStateModel(
                dag_run_id=dag_run_id,
                dag_id=f"dag_{unique}",
                run_id="run",
                task_id="task",
                map_index=-1,
                key="k",
                value='"v"',
            )
        )
        session.add(AssetStateModel(asset_id=asset_id, key="k", value='"v"'))
    with create_session() as session:
        task_row = session.get(TaskStateModel, (dag_run_id, "task", -1, "k"))
        asset_row = session.get(AssetStateModel, (asset_id, "k"))
        inserted = task_row.updated_at, asset_row.updated_at
        assert all(when is not None and when.tzinfo is not None for when in inserted)
        # Some databases keep whole seconds only in their default precision; allow for it.
        assert all(when >= before - timedelta(seconds=1) for when in inserted)
        # An update through the ORM moves updated_at, again without being told to.
        task_row.updated_at = asset_row.updated_at = before - timedelta(days=1)
    with create_session() as session:
        task_row = session.get(TaskStateModel, (dag_run_id, "task", -1, "k"))
        asset_row = session.get(AssetStateModel, (asset_id, "k"))
        task_row.value = asset_row.value = '"changed"'
    with create_session() as session:
        task_row = session.get(TaskStateModel, (dag_run_id, "task", -1, "k"))
        asset_row = session.get(AssetStateModel, (asset_id, "k"))
        assert (task_row.value, asset_row.value) == ('"changed"', '"changed"')
        assert task_row.updated_at >= before - timedelta(seconds=1)
        assert asset_row.updated_at >= before - timedelta(seconds=1)


def test_a_callers_session_is_joined_and_not_committed(backend, scope):
    from airflow import settings

    backend.set(scope, "k", "committed")
    session = settings.NonScopedSession()
    try:
        backend.set(scope, "k", "rolled back", session=session)
        backend.set(scope, "other", "rolled back", session=session)
        assert backend.get(scope, "k", session=session) == "rolled back"
        session.rollback()
    finally:
        session.close()
    assert backend.get(scope, "k") == "committed"
    assert backend.get(scope, "other") is None

    session = settings.NonScopedSession()
    try:
        backend.set(scope, "k", "now committed", session=session)
        session.commit()
    finally:
        session.close()
    assert backend.get(scope, "k") == "now committed"


@only_airflow32
def test_deleting_the_dag_run_deletes_its_task_state(backend, make_dag_run, unique):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import TaskStateModel

    gone_id = make_dag_run(f"dag_{unique}", "gone")
    make_dag_run(f"dag_{unique}", "kept")
    for run_id in ("gone", "kept"):
        for map_index in (-1, 0, 1):
            backend.set(TaskScope(f"dag_{unique}", run_id, "task", map_index), "k", run_id)

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.id == gone_id))

    rows = [r for r in stored_rows(TaskStateModel) if r.dag_id == f"dag_{unique}"]
    assert sorted({r.run_id for r in rows}) == ["kept"]
    assert len(rows) == 3


@only_airflow32
def test_deleting_the_asset_deletes_its_asset_state(backend, make_asset):
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import AssetStateModel

    gone, kept = make_asset(1), make_asset(2)
    for asset_id in (gone, kept):
        backend.set(AssetScope(asset_id), "watermark", str(asset_id))

    with create_session() as session:
        session.execute(delete(AssetModel).where(AssetModel.id == gone))

    remaining = {r.asset_id for r in stored_rows(AssetStateModel)}
    assert gone not in remaining and kept in remaining


@only_airflow32
def test_async_methods_run_on_airflows_async_engine(backend, scope):
    from airflow import settings

    with (
        statements_on(settings.async_engine.sync_engine) as async_seen,
        statements_on(settings.engine) as airflow_seen,
        autocommit_statements() as sync_seen,
    ):
        asyncio.run(backend.aset(scope, "k", "v"))
        assert asyncio.run(backend.aget(scope, "k")) == "v"
    assert len(async_seen) == 2 and sync_seen == [] and airflow_seen == []


def test_many_threads_writing_one_key_never_fail(backend, scope):
    errors: list[BaseException] = []
    barrier = threading.Barrier(12)

    def write(n: int) -> None:
        barrier.wait()
        try:
            for i in range(10):
                backend.set(scope, "contended", f"{n}-{i}")
                backend.set(scope, f"own-{n}", str(i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert backend.get(scope, "contended") in {f"{n}-9" for n in range(12)}
    assert all(backend.get(scope, f"own-{n}") == "9" for n in range(12))


def test_large_values_fit_on_every_database(backend, scope):
    # 4 MiB: past MySQL's TEXT (64 KiB), within MEDIUMTEXT (16 MiB).
    value = "€" * (4 * 1024 * 1024 // 3)
    backend.set(scope, "big", value)
    assert backend.get(scope, "big") == value


def test_keys_differing_only_by_trailing_space_stay_apart(backend, scope, db_kind):
    # MySQL's _bin collations ignore trailing spaces; keys are stored as bytes there.
    from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

    backend.set(scope, "k", "no space")
    if AIRFLOW_HAS_STATE_STORE and db_kind == "mysql":
        # Airflow 3.3's own key column (PAD SPACE): refused, never written over "k".
        with pytest.raises(StateCapabilityError, match="trailing spaces"):
            backend.set(scope, "k ", "one space")
        assert backend.get(scope, "k") == "no space"
        return
    backend.set(scope, "k ", "one space")
    assert backend.get(scope, "k") == "no space"
    assert backend.get(scope, "k ") == "one space"


@pytest.fixture
def pooled_engine(monkeypatch):
    """The tests run without pooling; this test needs the pool a deployment has."""
    from airflow_task_state.airflow_db import engine as _engine

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED", "True")
    monkeypatch.setattr(_engine, "_cached", None)
    yield _engine.autocommit_engine()
    _engine.autocommit_engine().dispose()
    monkeypatch.setattr(_engine, "_cached", None)


def test_the_state_engine_pool_has_its_own_size(monkeypatch, db_kind):
    """[state] database_pool_size, not Airflow's [database] sql_alchemy_pool_size; overflow is Airflow's."""
    if db_kind == "sqlite":
        pytest.skip("Airflow gives SQLite no pool size")
    from airflow_task_state.airflow_db import engine as _engine

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED", "True")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE", "3")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW", "4")
    monkeypatch.setenv("AIRFLOW__STATE__DATABASE_POOL_SIZE", "7")
    monkeypatch.setattr(_engine, "_cached", None)
    try:
        pool = _engine.autocommit_engine().pool
        assert (pool.size(), pool._max_overflow) == (7, 4)  # type: ignore[attr-defined]
    finally:
        _engine.autocommit_engine().dispose()
        monkeypatch.setattr(_engine, "_cached", None)


def kill_other_connections(db_kind):
    """The server drops every connection to the database but the one asking (the pool's too)."""
    from airflow import settings
    from sqlalchemy import create_engine, text

    kill = {
        "postgres": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND datname = current_database()",
        "mysql": None,
    }[db_kind]
    killer = create_engine(settings.SQL_ALCHEMY_CONN, isolation_level="AUTOCOMMIT")
    with killer.connect() as conn:
        if kill:
            conn.execute(text(kill))
        else:
            me = conn.execute(text("SELECT CONNECTION_ID()")).scalar()
            for (pid,) in conn.execute(
                text("SELECT id FROM information_schema.processlist WHERE db = DATABASE()")
            ):
                if pid != me:
                    conn.execute(text(f"KILL {pid}"))
    killer.dispose()


def test_a_connection_killed_by_the_server_is_replaced(backend, scope, db_kind, pooled_engine):
    """Without pre-ping, a dead pooled connection costs one retry, never a failed call."""
    if db_kind == "sqlite":
        pytest.skip("SQLite has no server to drop connections")
    backend.set(scope, "k", "before")
    assert pooled_engine.pool.checkedin() == 1
    kill_other_connections(db_kind)
    assert backend.get(scope, "k") == "before"
    backend.set(scope, "k", "after")
    assert backend.get(scope, "k") == "after"
    assert pooled_engine.pool.checkedin() == 1


def test_a_dead_pooled_connection_is_found_before_an_increment_is_sent(
    backend, scope, db_kind, pooled_engine
):
    """An increment is never sent twice, so it is sent only on a connection a ping found alive."""
    if db_kind == "sqlite":
        pytest.skip("SQLite has no server to drop connections")
    for write in (
        lambda: backend.increment(scope, "n", 1),
        lambda: backend.write(scope, "new", "v", if_version=0),
    ):
        backend.set(scope, "k", "v")
        assert pooled_engine.pool.checkedin() == 1
        kill_other_connections(db_kind)
        write()  # no error: the dead connection was replaced before anything was sent
    assert backend.get(scope, "n") == "1"
    assert backend.get_versioned(scope, "new").version == 1


@only_airflow32  # on 3.3 a write is a transaction on Airflow's engine, which pings every checkout
def test_only_a_connection_that_served_before_is_pinged_before_an_increment(
    backend, scope, pooled_engine, monkeypatch
):
    """
    A ping costs a round trip: a connection the pool has just opened cannot have been dropped yet,
    so an increment sent on it is not preceded by one; on a connection that served before, it is.
    """
    pings = []
    ping = pooled_engine.dialect.do_ping

    def counted_ping(dbapi_connection):
        pings.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(pooled_engine.dialect, "do_ping", counted_ping)
    backend.increment(scope, "n", 1)  # the pool opens a connection for it
    assert pings == [], "a connection just opened was pinged"
    backend.increment(scope, "n", 1)  # the same connection, from the pool
    assert len(pings) == 1, "a pooled connection that served before was not pinged"
    assert backend.get(scope, "n") == "2"
    assert pooled_engine.pool.checkedin() == 1


def test_a_failing_statement_raises_a_sqlalchemy_error_that_hides_its_parameters(
    backend, scope, pooled_engine
):
    """Stored values may be secrets: SQLAlchemy must not list them in error messages and logs."""
    from airflow_task_state.airflow_db.engine import execute
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    with pytest.raises(DBAPIError) as failure:
        execute(text("SELECT :secret FROM no_such_table"), {"secret": "hunter2"})
    assert "no_such_table" in str(failure.value)
    assert "[SQL parameters hidden" in str(failure.value)
    assert not failure.value.connection_invalidated
    # The connection went back to the pool in working order.
    backend.set(scope, "k", "still works")
    assert backend.get(scope, "k") == "still works"
    assert pooled_engine.pool.checkedin() == 1


# --- versions, expiry, increments, writers, clean-up ------------------------------------


def in_a_session(call):
    from airflow.utils.session import create_session

    with create_session() as session:
        return call(session)


@only_airflow32
def test_every_write_is_one_statement_that_returns_the_new_version(backend, scope):
    from datetime import timedelta

    from airflow._shared.timezones import timezone

    with autocommit_statements() as seen:
        assert backend.write(scope, "k", "1") == 1
        assert backend.write(scope, "k", "2", expires_at=timezone.utcnow() + timedelta(days=1)) == 2
        assert backend.write(scope, "k", "3", if_version=2) == 3
        assert backend.write(scope, "new", "1", if_version=0) == 1
        assert backend.increment(scope, "counter", 5) == 5
        assert backend.increment(scope, "counter", -7) == -2
    assert len(seen) == 6, seen
    assert seen[2].lstrip().upper().startswith("UPDATE TASK_STATE")


@only_airflow32
def test_a_refused_conditional_write_costs_one_select_and_writes_nothing(backend, scope):
    from airflow_shared.state import VersionedValue
    from airflow_task_state.exceptions import StateConflictError

    backend.write(scope, "k", "first")
    backend.write(scope, "k", "second")
    with autocommit_statements() as seen, pytest.raises(StateConflictError) as conflict:
        backend.write(scope, "k", "lost", if_version=1)
    assert (conflict.value.expected, conflict.value.stored) == (1, 2)
    assert len(seen) == 2, seen
    with pytest.raises(StateConflictError) as conflict:
        backend.write(scope, "k", "lost", if_version=0)
    assert (conflict.value.expected, conflict.value.stored) == (0, 2)
    assert backend.get_versioned(scope, "k") == VersionedValue("second", 2)


def test_conditional_writes_and_increments_join_a_callers_session(backend, scope):
    from airflow import settings

    backend.write(scope, "k", "committed")
    session = settings.NonScopedSession()
    try:
        assert backend.write(scope, "k", "rolled back", if_version=1, session=session) == 2
        assert backend.write(scope, "fresh", "rolled back", if_version=0, session=session) == 1
        assert backend.increment(scope, "n", 3, session=session) == 3
        assert backend.get_versioned(scope, "k", session=session).value == "rolled back"
        session.rollback()
    finally:
        session.close()
    assert backend.get_versioned(scope, "k").version == 1
    assert backend.get(scope, "fresh") is None and backend.get(scope, "n") is None


def test_a_refused_increment_leaves_no_trace_on_the_connection(backend, scope):
    """
    On MariaDB the guarded upsert reports its outcome in a session variable: a refused increment
    must not make a later insert on the same connection look refused (it would write twice).
    """
    backend.set(scope, "text", '"abc"')

    def calls(session):
        with pytest.raises(ValueError, match="not an integer"):
            backend.increment(scope, "text", session=session)
        assert backend.increment(scope, "absent", 4, session=session) == 4
        assert backend.write(scope, "created", "1", if_version=0, session=session) == 1
        return backend.get_versioned(scope, "absent", session=session)

    stored = in_a_session(calls)
    assert (stored.value, stored.version) == ("4", 1)
    assert backend.get_versioned(scope, "text").version == 1


@pytest.mark.parametrize(
    ("stored", "by", "expected"),
    [
        ("0", 1, 1),
        ("-5", 3, -2),
        (str(2**63 - 2), 1, 2**63 - 1),
        (str(-(2**63) + 1), -1, -(2**63)),
        # Integers in forms the SQL guard does not take are still counters: a versioned write.
        (" 7 ", 1, 8),
        ("007", 1, 8),
        ("-0", 2, 2),
    ],
)
def test_increment_takes_every_integer_python_takes(backend, scope, stored, by, expected):
    backend.set(scope, "n", stored)
    assert backend.increment(scope, "n", by) == expected
    assert backend.get_versioned(scope, "n").value == str(expected)


@pytest.mark.parametrize(
    ("stored", "by"),
    [(str(2**63 - 1), 1), (str(-(2**63)), -1), (str(2**63), 0), ("1.5", 1), ("1e3", 1), ('"7"', 1), ("", 1)],
)
def test_increment_refuses_and_writes_nothing(backend, scope, stored, by):
    backend.set(scope, "n", stored)
    with pytest.raises(ValueError, match="n"):
        backend.increment(scope, "n", by)
    assert backend.get_versioned(scope, "n").version == 1
    assert backend.get(scope, "n") == stored


def test_increment_of_a_missing_dag_run_or_asset_says_so(backend, unique):
    with pytest.raises(ValueError, match="No DagRun found"):
        backend.increment(TaskScope(f"dag_{unique}", "no_such_run", "task"), "n")
    with pytest.raises(ValueError, match="No asset found"):
        backend.increment(AssetScope(987654), "n")
    with pytest.raises(ValueError, match="No asset found"):
        backend.write(AssetScope(987654), "n", "1", if_version=0)


@only_airflow32
def test_writers_are_stored_in_their_columns(backend, scope, make_asset):
    from airflow_shared.state import API_WRITER, StateWriter
    from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel

    writer = StateWriter.task_try("etl", "manual__1", "load", 4, 3)
    backend.write(scope, "k", "1", writer=writer)
    (row,) = [r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id]
    assert (row.updated_by_try, row.version) == (3, 1)

    asset = AssetScope(make_asset(1))
    backend.increment(asset, "n", writer=writer)
    (row,) = [r for r in stored_rows(AssetStateModel) if r.asset_id == asset.asset_id]
    assert (
        row.updated_by,
        row.updated_by_dag_id,
        row.updated_by_run_id,
        row.updated_by_task_id,
        row.updated_by_map_index,
        row.updated_by_try,
    ) == ("task", "etl", "manual__1", "load", 4, 3)
    backend.write(asset, "n", "5", writer=API_WRITER, if_version=1)
    (row,) = [r for r in stored_rows(AssetStateModel) if r.asset_id == asset.asset_id]
    assert (row.updated_by, row.updated_by_dag_id, row.updated_by_try, row.version) == ("api", None, None, 2)
    (entry,) = backend.entries(asset).entries
    assert entry.writer == API_WRITER and entry.updated_by_try is None


@only_airflow32
def test_expired_rows_stay_until_cleanup_and_an_overwrite_continues_their_version(backend, scope, make_asset):
    from datetime import timedelta

    from airflow._shared.timezones import timezone
    from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel

    past = timezone.utcnow() - timedelta(seconds=1)
    asset = AssetScope(make_asset(1))
    for target in (scope, asset):
        backend.write(target, "gone", "1")
        backend.write(target, "gone", "2", expires_at=past)
        backend.write(target, "kept", "1", expires_at=timezone.utcnow() + timedelta(hours=1))
        assert backend.get(target, "gone") is None and backend.keys(target) == ["kept"]
    assert backend.key_counts([scope, asset]) == [1, 1]
    task_rows = {r.key: r for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id}
    assert task_rows["gone"].version == 2  # still there, invisible

    # A plain overwrite continues the version; a create (if_version=0) takes the expired row over.
    assert backend.write(scope, "gone", "3") == 3
    assert backend.write(asset, "gone", "3", if_version=0) == 3
    backend.write(scope, "gone", "4", expires_at=past)
    backend.write(asset, "gone", "4", expires_at=past)

    assert backend.cleanup(now=timezone.utcnow(), dry_run=True) >= 2
    assert backend.keys(scope) == ["kept"]
    assert "gone" in {r.key for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id}
    assert backend.cleanup(now=timezone.utcnow(), batch_size=1) >= 2
    assert {r.key for r in stored_rows(TaskStateModel) if r.dag_id == scope.dag_id} == {"kept"}
    assert {r.key for r in stored_rows(AssetStateModel) if r.asset_id == asset.asset_id} == {"kept"}
    # A key that comes back after clean-up starts again at version 1.
    assert backend.write(scope, "gone", "5") == 1


def test_cleanup_refuses_bad_arguments(backend):
    from datetime import datetime

    from airflow._shared.timezones import timezone

    with pytest.raises(ValueError, match="timezone-aware"):
        backend.cleanup(now=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="batch_size"):
        backend.cleanup(now=timezone.utcnow(), batch_size=0)
    with pytest.raises(TypeError, match="updated_before"):
        backend.cleanup(now=timezone.utcnow(), updated_before="yesterday")


@only_airflow32
def test_async_versioned_calls_run_on_airflows_async_engine(backend, scope):
    from airflow import settings
    from airflow_shared.state import VersionedValue

    async def calls():
        assert await backend.awrite(scope, "k", "1", if_version=0) == 1
        assert await backend.aincrement(scope, "k", 2) == 3
        return await backend.aget_versioned(scope, "k")

    with statements_on(settings.async_engine.sync_engine) as async_seen, autocommit_statements() as sync_seen:
        assert asyncio.run(calls()) == VersionedValue("3", 2)
    assert len(async_seen) == 3 and sync_seen == []


# --- batches -------------------------------------------------------------------------


@only_airflow32
def test_each_batch_is_one_statement(backend, scope, make_asset):
    offsets = {f"partition-{n}": str(n * 100) for n in range(100)}
    asset = AssetScope(make_asset(1))
    with autocommit_statements() as seen:
        assert set(backend.set_many(scope, offsets).values()) == {1}
        assert backend.get_many(scope, list(offsets)) == offsets
        backend.delete_many(scope, list(offsets)[:50])
        backend.set_many(asset, {"a": "1", "b": "2"})
        assert backend.get_many(asset, ["a", "b", "c"]) == {"a": "1", "b": "2"}
    assert len(seen) == 5, seen
    assert seen[0].lstrip().upper().startswith("INSERT INTO TASK_STATE")
    assert backend.get_many(scope, list(offsets)) == dict(list(offsets.items())[50:])


def test_empty_batches_send_nothing(backend, scope):
    with autocommit_statements() as seen:
        assert backend.get_many(scope, []) == {}
        assert backend.set_many(scope, {}) == {}
        backend.delete_many(scope, [])
        with pytest.raises(ValueError):
            backend.set_many(scope, {"ok": "1", "": "2"})
    assert seen == []


@pytest.mark.parametrize("size", [1, 2, 3, 250, 251, 257, 999])
def test_batches_of_every_size_round_trip(backend, scope, size):
    # Around the statement sizes: reads and deletes are padded to powers of two, and set_many
    # splits its UNION ALL into groups of 250 rows (SQLite's compound SELECT limit is 500).
    values = {f"k{n}": f"v{n}" for n in range(size)}
    backend.set(scope, "k0", "old")
    versions = backend.set_many(scope, values)
    assert versions == {key: 2 if key == "k0" else 1 for key in values}
    assert backend.get_many(scope, [*values, "absent"]) == values
    backend.delete_many(scope, list(values)[1:])
    assert backend.get_many(scope, list(values)) == {"k0": "v0"}


@only_airflow32
def test_set_many_without_a_dag_run_or_asset_fails_and_writes_nothing(backend, unique):
    from airflow_task_state.metastore.models import TaskStateModel

    orphan = TaskScope(f"dag_{unique}", "no_such_run", "task")
    with pytest.raises(ValueError, match="No DagRun found"):
        backend.set_many(orphan, {"a": "1", "b": "2"})
    with pytest.raises(ValueError, match="No DagRun found"):
        asyncio.run(backend.aset_many(orphan, {"a": "1"}))
    with pytest.raises(ValueError, match="No asset found with id 987654"):
        backend.set_many(AssetScope(987654), {"a": "1"})
    assert not [r for r in stored_rows(TaskStateModel) if r.dag_id == orphan.dag_id]


def test_batches_join_a_callers_session_and_roll_back_with_it(backend, scope):
    from airflow import settings

    backend.set_many(scope, {"a": "committed", "b": "committed"})
    session = settings.NonScopedSession()
    try:
        backend.set_many(scope, {"a": "rolled back", "c": "rolled back"}, session=session)
        backend.delete_many(scope, ["b"], session=session)
        assert backend.get_many(scope, ["a", "b", "c"], session=session) == {
            "a": "rolled back",
            "c": "rolled back",
        }
        session.rollback()
    finally:
        session.close()
    assert backend.get_many(scope, ["a", "b", "c"]) == {"a": "committed", "b": "committed"}


def test_async_batches_run_on_airflows_async_engine(backend, scope):
    async def scenario():
        await backend.aset_many(scope, {"a": "1", "b": "2"})
        await backend.adelete_many(scope, ["b"])
        return await backend.aget_many(scope, ["a", "b"])

    assert asyncio.run(scenario()) == {"a": "1"}


def test_set_many_records_the_writer_and_expiry_of_every_key(backend, scope, make_asset):
    from datetime import timedelta

    from airflow._shared.timezones import timezone
    from airflow_shared.state import StateWriter

    until = timezone.utcnow() + timedelta(days=2)
    writer = StateWriter.task_try(scope.dag_id, scope.run_id, scope.task_id, -1, 4)
    asset = AssetScope(make_asset(1))
    backend.set_many(scope, {"a": "1", "b": "2"}, writer=writer, expires_at=until)
    backend.set_many(asset, {"w": "1"}, writer=writer)
    task_entries = {e.key: e for e in backend.entries(scope).entries}
    assert {e.updated_by_try for e in task_entries.values()} == {4}
    assert all(abs((e.expires_at - until).total_seconds()) < 0.01 for e in task_entries.values())
    (asset_entry,) = backend.entries(asset).entries
    assert asset_entry.writer == writer and asset_entry.expires_at is None


@only_airflow32
def test_an_operator_reading_one_key_sends_one_statement_in_a_scope_of_10000_keys(backend, scope, make_asset):
    """`manage.entry` (REST GET of a key, `airflow state get/delete`, each import row) reads one row."""
    from airflow import settings
    from airflow_task_state import manage

    asset = AssetScope(make_asset(1))
    for target in (scope, asset):
        for start in range(0, 10_000, 1000):
            backend.set_many(target, {f"key/{n:05d}": f'"{n}"' for n in range(start, start + 1000)})
    backend.write(asset, "key/04321", '"4321"', writer=CLI_WRITER)
    for target in (scope, asset):
        with autocommit_statements() as sent, statements_on(settings.engine) as listed:
            entry = manage.entry(target, "key/04321")
        assert (entry.key, entry.value, entry.version) == ("key/04321", "4321", 1 if target is scope else 2)
        assert entry.updated_at is not None
        assert not [s for s in listed if "task_state" in s or "asset_state" in s], (
            "found by listing the scope"
        )
        # A task scope also asks Airflow's try history whether a clear discarded the key: one read.
        assert len(listed) == (1 if target is scope else 0), listed
        assert len(sent) == 1, sent
        assert "LIMIT" not in sent[0].upper() and "ORDER BY" not in sent[0].upper()
    assert entry.updated_by is not None and entry.updated_by.kind == "cli"
    with autocommit_statements() as sent, pytest.raises(manage.NotFound):
        manage.entry(scope, "key/")
    assert len(sent) == 1


def test_get_entry_joins_a_callers_session_with_one_statement(backend, scope):
    from airflow.utils.session import create_session

    backend.set_many(scope, {f"k{n:04d}": str(n) for n in range(1000)})
    with create_session() as session, statements_on(session.get_bind()) as seen:
        found = backend.get_entry(scope, "k0042", session=session)
    assert found is not None and found.value == "42"
    assert len(seen) == 1, seen


def test_every_method_takes_the_contracts_arguments_by_name(backend, scope):
    """The methods hand their arguments on to operations: each takes the contract's names."""
    assert backend.write(scope=scope, key="k", value="1", writer=None, expires_at=None, if_version=0) == 1
    assert backend.set_many(scope=scope, values={"m": "v"}, writer=None, expires_at=None) == {"m": 1}
    assert backend.increment(scope=scope, key="k", by=2, writer=None, expires_at=None) == 3
    backend.set_by_try(scope=scope, key="t", value="v", try_number=1)
    assert backend.get_versioned(scope=scope, key="t").version == 1
    assert backend.get_many(scope=scope, keys=["k", "t"]) == {"k": "3", "t": "v"}
    assert backend.get_entry(scope=scope, key="t").updated_by_try == 1
    backend.delete_many(scope=scope, keys=["m"])
    backend.delete(scope=scope, key="t")
    assert backend.keys(scope=scope) == ["k"]
    backend.clear(scope=scope, all_map_indices=True)
    assert asyncio.run(backend.akeys(scope=scope)) == []


@pytest.mark.only_airflow33
def test_a_write_after_airflows_own_continues_from_the_version_the_key_reads_with(backend, scope):
    """
    Airflow's own backend records no version: the key it wrote reads one version on, and a write of
    ours (one statement on PostgreSQL, a transaction elsewhere) goes one past that, a try recorded.
    """
    from airflow._shared.state import TaskScope as AirflowTaskScope
    from airflow.state.metastore import MetastoreBackend

    theirs = AirflowTaskScope(scope.dag_id, scope.run_id, scope.task_id)
    assert backend.write(scope, "k", '"ours"') == 1
    MetastoreBackend().set(theirs, "k", '"theirs"')
    MetastoreBackend().set(theirs, "fresh", '"theirs"')
    assert [backend.get_entry(scope, key).version for key in ("k", "fresh")] == [2, 1]
    assert [backend.get_versioned(scope, key).version for key in ("k", "fresh")] == [2, 1]
    backend.set_by_try(scope, "k", '"ours again"', try_number=3)
    entry = backend.get_entry(scope, "k")
    assert (entry.value, entry.version, entry.updated_by_try) == ('"ours again"', 3, 3)
    assert backend.set_many(scope, {"fresh": "1", "new": "2", "k": "3"}) == {"fresh": 2, "new": 1, "k": 4}
    assert MetastoreBackend().get(theirs, "new") == "2"  # one store: Airflow reads our writes


def _a_try_running(make_task_instances, unique):
    """A task instance running its try 2: its scope, its id, and how to change its row."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    dag_id = f"dag_{unique}"
    make_task_instances(dag_id, "run_1", ("task", -1))
    this_ti = (TaskInstance.dag_id == dag_id, TaskInstance.task_id == "task")

    def set_ti(**values):
        with create_session() as session:
            session.execute(update(TaskInstance).where(*this_ti).values(**values))

    with create_session() as session:
        ti_id = str(session.scalar(select(TaskInstance.id).where(*this_ti)))
    set_ti(state="running", try_number=2)
    return TaskScope(dag_id, "run_1", "task"), ti_id, set_ti


def _refused_while_not_running(attempt, set_ti, unchanged):
    """*attempt* (try_number=, of=) raises TryNotRunning for each try not running; *unchanged*(case) after."""
    from airflow_task_state.exceptions import TryNotRunning

    refused = {
        "an earlier try": lambda: attempt(try_number=1),
        "another task instance": lambda: attempt(of="01234567-89ab-7def-8123-456789abcdef"),
    }
    set_ti(state="success")
    refused["a try that ended"] = attempt
    for case, refused_attempt in refused.items():
        with pytest.raises(TryNotRunning):
            refused_attempt()
        unchanged(case)


def test_a_write_while_running_writes_only_while_its_try_runs(backend, make_task_instances, unique, db_kind):
    """
    The state API's write by a running try (``write_while_running``): its one statement writes only
    while the task instance runs that very try; otherwise it writes nothing and says so. On Airflow
    3.3, where a write is one round trip (PostgreSQL); elsewhere there it declines, writing nothing.
    """
    from airflow_shared.state import StateWriter
    from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

    task_scope, ti_id, set_ti = _a_try_running(make_task_instances, unique)

    def write(value='"x"', try_number=2, of=ti_id):
        writer = StateWriter.task_try(*astuple(task_scope)[:3], -1, try_number)
        return backend.write_while_running(task_scope, "job", value, writer, None, of)

    if AIRFLOW_HAS_STATE_STORE and db_kind != "postgres":
        assert write('"first"') is None and backend.get(task_scope, "job") is None
        return
    assert write('"first"') == 1
    assert write('"second"') == 2

    def unchanged(case):
        stored = backend.get_entry(task_scope, "job")
        assert (stored.value, stored.version, stored.updated_by_try) == ('"second"', 2, 2), case

    _refused_while_not_running(write, set_ti, unchanged)


@only_airflow32  # on Airflow 3.3 an increment checks its try in a statement of its own
def test_an_increment_while_running_adds_only_while_its_try_runs(backend, make_task_instances, unique):
    """
    The state API's increment by a running try (``increment_while_running``): one statement that
    adds only while the task instance runs that very try, and adds nothing (TryNotRunning, for the
    ordinary increment to tell why) when the try does not run or the stored value is no integer.
    """
    from airflow_shared.state import StateWriter
    from airflow_task_state.exceptions import TryNotRunning

    task_scope, ti_id, set_ti = _a_try_running(make_task_instances, unique)

    def add(by=1, key="n", try_number=2, of=ti_id):
        writer = StateWriter.task_try(*astuple(task_scope)[:3], -1, try_number)
        return backend.increment_while_running(task_scope, key, by, writer, None, of)

    assert add() == 1
    assert add(41) == 42 and add(-50) == -8
    backend.set(task_scope, "text", '"seven"')
    with pytest.raises(TryNotRunning):
        add(key="text")
    assert backend.get(task_scope, "text") == '"seven"'

    def unchanged(case):
        stored = backend.get_entry(task_scope, "n")
        assert (stored.value, stored.version, stored.updated_by_try) == ("-8", 3, 2), case

    _refused_while_not_running(add, set_ti, unchanged)
