"""
A reply lost after the database committed: the connection breaks between the commit of a statement
and its answer. A statement that is not idempotent (an increment, a create-only or conditional
write) must then not be sent again, or it counts twice or reports a conflict with itself; the
caller learns that the outcome is unknown. Idempotent statements are still retried.

A TCP proxy of the test sits between the backend's autocommit engine and the real PostgreSQL or
MariaDB server. Armed, it forwards the next statement that touches state to the server, waits for
the server's answer (so the statement has run and committed), drops it and closes both sides.
"""

from __future__ import annotations

import pytest
from state_testing.proxy import autocommit_engine_through_a_proxy


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


def losing_the_reply(proxy, call):
    """Run *call* with the reply to its statement lost; return what it returned or raised."""
    proxy.arm(b"task_state")
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


def test_an_idempotent_write_whose_reply_is_lost_is_sent_again(backend, scope, proxy):
    # No error: writing the same value again is harmless, and so is reading again.
    assert losing_the_reply(proxy, lambda: backend.set(scope, "job", "app_001")) is None
    assert stored(scope, "job").value == "app_001"
    assert losing_the_reply(proxy, lambda: backend.get(scope, "job")) == "app_001"
