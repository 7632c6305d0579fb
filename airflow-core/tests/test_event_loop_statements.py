# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
[state] event_loop_statements: on PostgreSQL a task's plain get and set run their statement on the
API server's event loop (asyncpg), with the same answers, refusals and guarantees as in a thread,
on both Airflow lines (on 3.3 a set is a transaction over two tables).
"""

from __future__ import annotations

import pytest
from test_metastore import autocommit_statements, sql_on_the_event_loop
from test_state_api import (  # noqa: F401 (fixtures)
    api,
    assert_unavailable_only_while_down,
    at,
    auth,
    detail,
    exercise_ti,
    running,
    session_key,
    set_ti_state,
    steadily_through_a_restart,
)

# asyncpg's statement cache turned off, as behind PgBouncer in transaction mode (before 1.21).
WITHOUT_STATEMENT_CACHE = {"statement_cache_size": 0}


@pytest.fixture(autouse=True)
def _postgres_only(db_kind):
    if db_kind != "postgres":
        pytest.skip("only PostgreSQL runs statements on the event loop: use --db postgres")


@pytest.fixture
def on_the_loop(monkeypatch):
    """The SQL of the statements run on the event loop."""
    from airflow_task_state.airflow_db import event_loop

    sent: list[str] = []
    run = event_loop.execute

    async def recording(statement, values):
        sent.append(sql_on_the_event_loop(statement))
        return await run(statement, values)

    monkeypatch.setattr(event_loop, "execute", recording)
    return sent


def prepared_statements(api) -> int:
    """How many statements the state API's connection holds prepared on the server."""
    from airflow_task_state.airflow_db import event_loop

    async def count() -> int:
        engine = event_loop._engine()
        connection = await engine.connection()  # the one the requests used
        try:
            return await connection.driver_connection.fetchval("SELECT count(*) FROM pg_prepared_statements")
        finally:
            engine.done(connection)

    return api.portal.call(count)


def test_plain_gets_and_sets_run_on_the_event_loop_prepared_once(api, running, on_the_loop):
    headers = auth(running)
    # The try's first set checks its task instance in a thread; the rest need no check there.
    assert api.get(**at(running, "first"), headers=headers).status_code == 404
    assert api.put(**at(running, "first"), json={"value": 0}, headers=headers).status_code == 200
    assert api.get(**at(running, "first"), headers=headers).json()["value"] == 0
    on_the_loop.clear()
    prepared = prepared_statements(api)  # ours, and what SQLAlchemy's set-up of the connection sent
    versions = [
        api.put(**at(running, "job"), json={"value": {"id": n}}, headers=headers).json()["version"]
        for n in range(5)
    ]
    read = api.get(**at(running, "job"), headers=headers).json()
    assert versions == list(range(versions[0], versions[0] + 5))
    assert read == {"key": "job", "value": {"id": 4}, "version": versions[-1]}
    assert len(on_the_loop) == 6, on_the_loop
    assert all("task_instance" in sql for sql in on_the_loop[:5]), "a set checks its try in its statement"
    # The read and the write were prepared on the connection once, not once per request.
    assert prepared >= 2 and prepared_statements(api) == prepared


def test_a_read_after_a_pause_checks_its_task_instance_on_the_loop(api, running, on_the_loop, monkeypatch):
    """
    A task that reads now and then (a job's status every few seconds) finds its last check of its
    task instance too old to trust: the check runs on the loop as well, no statement in a thread,
    and refuses a try that a new one superseded, as the thread's check does.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow_task_state.api import task_instance_checks
    from sqlalchemy import update

    headers = auth(running)
    monkeypatch.setattr(task_instance_checks, "READ_CHECK_SECONDS", 0.0)  # every check is too old
    monkeypatch.setattr(task_instance_checks, "_recently_checked", {})  # earlier tests' checks too
    assert api.put(**at(running, "status"), json={"value": "RUNNING"}, headers=headers).status_code == 200
    on_the_loop.clear()
    with autocommit_statements() as anywhere:
        for _ in range(3):
            assert api.get(**at(running, "status"), headers=headers).json()["value"] == "RUNNING"
    assert anywhere == on_the_loop and len(on_the_loop) == 6, anywhere
    assert all("task_instance" in sql for sql in on_the_loop[::2]), "each read checked, on the loop"

    def set_try_number(try_number: int) -> None:
        with create_session() as session:
            session.execute(
                update(TaskInstance).where(TaskInstance.id == running.ti_id).values(try_number=try_number)
            )

    set_try_number(running.try_number + 1)  # a new try superseded the credential's
    try:
        refused = api.get(**at(running, "status"), headers=headers)
        assert refused.status_code == 403 and detail(refused)["reason"] == "forbidden"
        assert "does not match task instance" in detail(refused)["message"]
    finally:
        set_try_number(running.try_number)  # the module's other tests share the running try


def test_without_asyncpgs_statement_cache_nothing_stays_prepared(api, running, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC",
        f"{__name__}.WITHOUT_STATEMENT_CACHE",
    )
    from airflow_task_state.airflow_db import event_loop

    api.portal.call(event_loop.dispose)  # the next request builds the engine with these arguments,
    api.portal.call(event_loop.serve_here)  # still on the server's loop, as the app's lifespan said
    headers = auth(running)
    for n in range(3):
        assert api.put(**at(running, "job"), json={"value": n}, headers=headers).status_code == 200
    assert api.get(**at(running, "job"), headers=headers).json()["value"] == 2
    assert prepared_statements(api) == 0


def test_turned_off_every_statement_runs_in_a_thread(api, running, on_the_loop, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__EVENT_LOOP_STATEMENTS", "False")
    headers = auth(running)
    with autocommit_statements() as in_threads:
        assert api.put(**at(running, "job"), json={"value": 7}, headers=headers).status_code == 200
        assert api.get(**at(running, "job"), headers=headers).json()["value"] == 7
    assert on_the_loop == [] and len(in_threads) >= 2


def test_a_try_that_ended_is_refused_with_its_reason_and_nothing_written(api, running, on_the_loop):
    headers = auth(running)
    assert api.put(**at(running, "job"), json={"value": 1}, headers=headers).status_code == 200
    set_ti_state(running, "success")
    refused = api.put(**at(running, "job"), json={"value": 2}, headers=headers)
    assert refused.status_code == 403 and detail(refused)["reason"] == "not_running"
    assert any("task_instance" in sql for sql in on_the_loop), "the write on the loop found it ended"
    assert api.get(**at(running, "job"), headers=headers).json()["value"] == 1


def test_connections_the_server_dropped_are_replaced_and_nothing_is_lost(api, running):
    """Every connection of the pool killed (a failover, an idle timeout): the next calls reconnect."""
    from airflow.utils.session import create_session
    from sqlalchemy import text

    headers = auth(running)
    for n in range(3):
        assert api.put(**at(running, f"k{n}"), json={"value": n}, headers=headers).status_code == 200
    assert api.get(**at(running, "k0"), headers=headers).json()["value"] == 0  # the loop's, pooled
    with create_session() as session:
        killed = session.scalar(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
        )
    assert killed >= 1
    assert api.put(**at(running, "k0"), json={"value": 10}, headers=headers).status_code == 200
    values = [api.get(**at(running, f"k{n}"), headers=headers).json()["value"] for n in range(3)]
    assert values == [10, 1, 2]


def test_writes_through_a_database_restart_are_503_or_stored_never_500(api, running):
    """During a restart a set answers 200 or 503 (database_unavailable); what it acknowledged stays."""
    headers = auth(running)
    assert api.put(**at(running, "through_restart"), json={"value": -1}, headers=headers).status_code == 200
    answers, back_at = steadily_through_a_restart(
        lambda number: api.put(**at(running, "through_restart"), json={"value": number}, headers=headers)
    )
    assert_unavailable_only_while_down(answers, back_at)
    last_acknowledged = max(number for _, number, response in answers if response.status_code == 200)
    stored = api.get(**at(running, "through_restart"), headers=headers).json()["value"]
    assert stored == last_acknowledged


def test_the_api_servers_lifespan_keeps_a_connection_while_it_lasts_and_closes_it_at_its_end(
    running, session_key, monkeypatch
):
    """On Airflow's whole app, as `airflow api-server` serves it: no connection is left open at exit."""
    from airflow.api_fastapi.app import create_app
    from airflow_task_state import plugin
    from airflow_task_state.airflow_db import event_loop
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-test-secret-of-airflows-own-tokens")
    monkeypatch.setenv("AIRFLOW__STATE__FREEZE_GC_AFTER_STARTUP", "False")
    monkeypatch.setattr(plugin.STATE_API, "_serving", False)
    headers, url = auth(running), f"/state/task-instances/{running.ti_id}/value"
    with TestClient(create_app()) as airflow:
        for n in range(5):  # after the first, on the event loop: one connection, kept between statements
            written = airflow.put(url, params={"key": "job"}, json={"value": n}, headers=headers)
            assert written.status_code == 200
        assert airflow.get(url, params={"key": "job"}, headers=headers).json()["value"] == 4
        pool = airflow.portal.call(_pool_of_the_loop)
        assert pool.checkedout() == 1
    assert pool.checkedout() == 0 and event_loop._cached is None


async def _pool_of_the_loop():
    from airflow_task_state.airflow_db import event_loop

    return event_loop._engine().engine.sync_engine.pool
