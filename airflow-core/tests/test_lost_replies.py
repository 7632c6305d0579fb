"""
A reply lost after the database committed: the connection breaks between the commit of a statement
and its answer. A statement that is not idempotent (an increment, a create-only or conditional
write) must then not be sent again, or it counts twice or reports a conflict with itself; the
caller learns that the outcome is unknown. Idempotent statements are still retried.

A TCP proxy of the test sits between the backend and the real PostgreSQL or MariaDB server. Armed,
it forwards the statement that applies the write to the server, waits for the server's answer (so
the write has run and committed), drops it and closes both sides. Both lines write on the backend's
own autocommit engine. On Airflow 3.2 that statement is the write itself (one statement); on Airflow
3.3 a write is a transaction of several statements on one connection (Airflow's rows and ours beside
them), and the statement that applies it is its COMMIT: a connection lost before the COMMIT leaves
nothing applied, so the whole transaction is sent again on a new connection.
"""

from __future__ import annotations

import pytest
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE
from state_testing.proxy import autocommit_engine_through_a_proxy

#: What the statement that applies a write contains.
APPLYING = b"COMMIT" if AIRFLOW_HAS_STATE_STORE else b"task_state"


@pytest.fixture
def proxy(db_kind):
    if db_kind == "sqlite":
        pytest.skip("SQLite has no connection to lose")
    with autocommit_engine_through_a_proxy() as proxy:
        yield proxy


@pytest.fixture
def scope(make_dag_run, unique):
    from airflow_shared.state import TaskScope

    make_dag_run(f"dag_{unique}", "run_1")
    return TaskScope(f"dag_{unique}", "run_1", "task")


def stored(scope, key):
    """What is stored, read on a direct connection (Airflow's own engine, not the proxy)."""
    from airflow.utils.session import create_session
    from airflow_task_state.metastore import MetastoreStateBackend

    with create_session() as session:
        return MetastoreStateBackend().get_versioned(scope, key, session=session)


def losing_the_reply(proxy, call, statement=APPLYING, and_the_server=False):
    """
    Run *call* with the reply to its *statement* lost (and every connection after it refused, *and
    the server*); return what it returned or raised.
    """
    proxy.arm(statement, and_stop=and_the_server)
    try:
        outcome = call()
    except Exception as error:
        outcome = error
    assert proxy.dropped.is_set(), "the proxy never saw the statement"
    return outcome


def assert_outcome_unknown(outcome: object) -> None:
    assert type(outcome).__name__ == "StatementOutcomeUnknownError", repr(outcome)
    from airflow_task_state.airflow_db.engine import StatementOutcomeUnknownError, is_unavailable

    assert isinstance(outcome, StatementOutcomeUnknownError)
    assert "may or may not have been applied" in str(outcome)
    assert is_unavailable(outcome)  # the state API answers 503 database_unavailable


def test_an_increment_whose_reply_is_lost_is_applied_once_and_says_the_outcome_is_unknown(
    backend, scope, proxy
):
    assert backend.increment(scope, "rows", 1) == 1
    outcome = losing_the_reply(proxy, lambda: backend.increment(scope, "rows", 5))
    assert stored(scope, "rows").value == "6", f"applied twice or not at all; the call gave {outcome!r}"
    assert_outcome_unknown(outcome)
    assert backend.increment(scope, "rows", 1) == 7  # the next call gets a new connection


def test_a_create_only_write_whose_reply_is_lost_does_not_conflict_with_itself(backend, scope, proxy):
    outcome = losing_the_reply(proxy, lambda: backend.write(scope, "owner", "me", if_version=0))
    assert (stored(scope, "owner").value, stored(scope, "owner").version) == ("me", 1)
    assert_outcome_unknown(outcome)


def test_a_conditional_write_whose_reply_is_lost_does_not_conflict_with_itself(backend, scope, proxy):
    assert backend.write(scope, "cursor", "1") == 1
    outcome = losing_the_reply(proxy, lambda: backend.write(scope, "cursor", "2", if_version=1))
    assert (stored(scope, "cursor").value, stored(scope, "cursor").version) == ("2", 2)
    assert_outcome_unknown(outcome)


def test_an_idempotent_write_whose_reply_is_lost_is_sent_again(backend, scope, proxy, db_kind):
    if AIRFLOW_HAS_STATE_STORE and db_kind != "postgres":
        pytest.skip("on 3.3 a set is a transaction except on PostgreSQL: a lost COMMIT's outcome is unknown")
    # No error: writing the same value again is harmless, and so is reading again.
    assert losing_the_reply(proxy, lambda: backend.set(scope, "job", "app_001"), b"task_state") is None
    assert stored(scope, "job").value == "app_001"
    assert losing_the_reply(proxy, lambda: backend.get(scope, "job"), b"task_state") == "app_001"


@pytest.mark.only_airflow33
def test_a_write_that_loses_its_connection_before_it_commits_is_sent_again_and_applied_once(
    backend, scope, proxy
):
    """The lost transaction is rolled back with its connection; the one sent again counts once."""
    assert backend.increment(scope, "rows", 1) == 1
    assert losing_the_reply(proxy, lambda: backend.increment(scope, "rows", 5), b"task_state") == 6
    assert stored(scope, "rows").value == "6"
    assert backend.increment(scope, "rows", 1) == 7


@pytest.mark.only_airflow33
def test_a_write_that_loses_its_connection_and_then_the_server_before_it_commits_applies_nothing(
    backend, scope, proxy
):
    from airflow_task_state.airflow_db.engine import StatementOutcomeUnknownError, is_unavailable

    assert backend.increment(scope, "rows", 1) == 1
    outcome = losing_the_reply(
        proxy, lambda: backend.increment(scope, "rows", 5), b"task_state", and_the_server=True
    )
    assert is_unavailable(outcome) and not isinstance(outcome, StatementOutcomeUnknownError), repr(outcome)
    assert stored(scope, "rows").value == "1"
