"""
State calls through a real database restart, and which errors say "the database is unreachable".

The restart tests restart the PostgreSQL server of the test run (``pg_ctl restart``) under threads
that call the metastore backend without a session, the path every state API call takes, on the
autocommit engine with a real pool.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import pytest

THREADS = 4
# Twice the threads: the first call after a restart can draw a dead connection for its retry too.
POOL_SIZE = 2 * THREADS
KEYS_PER_THREAD = 3
# Between two rounds (a set and a get) of one thread: steady calls, not a busy loop.
PAUSE = 0.01


@dataclass
class Call:
    op: str
    key: str
    value: str | None  # the value written, or the value read
    start: float
    end: float
    error: BaseException | None = None


@dataclass
class Worker:
    """One thread's calls: it sets a key of its own, reads it back, and again, recording each call."""

    index: int
    calls: list[Call] = field(default_factory=list)
    seq: int = 0

    def run(self, backend, scope, stop: threading.Event) -> None:
        while not stop.is_set():
            key = f"t{self.index}_k{self.seq % KEYS_PER_THREAD}"
            value = f"secret-{self.index}-{self.seq}"
            self.seq += 1
            start = time.monotonic()
            try:
                backend.set(scope, key, value)
            except Exception as error:
                self.calls.append(Call("set", key, value, start, time.monotonic(), error))
            else:
                self.calls.append(Call("set", key, value, start, time.monotonic()))
            start = time.monotonic()
            try:
                read = backend.get(scope, key)
            except Exception as error:
                self.calls.append(Call("get", key, None, start, time.monotonic(), error))
            else:
                self.calls.append(Call("get", key, read, start, time.monotonic()))
            time.sleep(PAUSE)


class Load:
    """THREADS workers calling the backend until stopped; they can be started again."""

    def __init__(self, backend, scope) -> None:
        self.backend, self.scope = backend, scope
        self.workers = [Worker(i) for i in range(THREADS)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stop.clear()
        self._threads = [
            threading.Thread(target=w.run, args=(self.backend, self.scope, self._stop), daemon=True)
            for w in self.workers
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    @property
    def calls(self) -> list[Call]:
        return [call for worker in self.workers for call in worker.calls]


class Probe:
    """Connects afresh every few milliseconds, to see the server go away and come back."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        parts = make_url(url)
        self._connect_args = {
            "host": parts.host,
            "port": parts.port,
            "user": parts.username,
            "dbname": parts.database,
            "connect_timeout": 2,
        }
        self.results: list[tuple[float, float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg2

        while not self._stop.is_set():
            start = time.monotonic()
            try:
                connection = psycopg2.connect(**self._connect_args)
                try:
                    connection.cursor().execute("SELECT 1")
                finally:
                    connection.close()
                ok = True
            except psycopg2.Error:
                ok = False
            self.results.append((start, time.monotonic(), ok))
            time.sleep(0.002)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def back_at(self) -> float:
        """When the first connection after the last refused one was made."""
        failed = [start for start, _, ok in self.results if not ok]
        assert failed, "the probe never found the server down: it did not restart"
        back = [end for start, end, ok in self.results if ok and start > failed[-1]]
        assert back, "the probe never found the server back"
        return back[0]


@pytest.fixture
def postgres_url(db_kind) -> str:
    if db_kind != "postgres":
        pytest.skip(f"restarts the PostgreSQL server of the run, so only with --db postgres (not {db_kind})")
    return os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


@pytest.fixture
def pooled_engine(monkeypatch):
    """The autocommit engine with a pool, as deployed (the test run disables pooling)."""
    from airflow_task_state.airflow_db import engine as _engine

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED", "True")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE", str(POOL_SIZE))
    monkeypatch.setattr(_engine, "_cached", None)
    engine = _engine.autocommit_engine()
    yield engine
    engine.dispose()
    monkeypatch.setattr(_engine, "_cached", None)


@pytest.fixture
def scope(make_dag_run, unique):
    from airflow_shared.state import TaskScope

    make_dag_run(f"dag_{unique}", "run_1")
    return TaskScope(f"dag_{unique}", "run_1", "task")


@pytest.mark.parametrize("mode", ["fast", "immediate"])
@pytest.mark.parametrize(
    "calls_during_restart",
    [
        pytest.param(True, id="calls-throughout"),
        # The first calls after a restart meet only dead connections: the pool has had no call
        # to find them dead (an API server between requests).
        pytest.param(False, id="calls-resume-after"),
    ],
)
def test_state_calls_work_again_as_soon_as_postgres_is_back(
    mode, calls_during_restart, postgres_url, pooled_engine, backend, scope
):
    from airflow_task_state.airflow_db.engine import is_unavailable
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import QueuePool
    from state_testing import dbservers

    # Fill the pool: after the restart each of these connections is dead.
    assert isinstance(pooled_engine.pool, QueuePool)
    held = [pooled_engine.raw_connection() for _ in range(POOL_SIZE)]
    for connection in held:
        connection.close()
    load = Load(backend, scope)
    with Probe(postgres_url) as probe:
        load.start()
        time.sleep(0.5)
        if not calls_during_restart:
            load.stop()
        # At most THREADS connections are in use: the others wait in the pool.
        assert pooled_engine.pool.checkedin() >= POOL_SIZE - THREADS >= 2
        restart_began = time.monotonic()
        dbservers.restart_postgres(postgres_url, mode=mode)
        # pg_ctl -w returns once the server accepts connections; the probe may have seen it earlier.
        restarted = time.monotonic()
        if not calls_during_restart:
            load.start()
        time.sleep(1.0)
        load.stop()
    back_at = min(probe.back_at(), restarted)
    calls = load.calls
    failed = [call for call in calls if call.error is not None]

    assert not [call for call in failed if call.end < restart_began]
    # Once the server accepted connections again, no call failed.
    assert not [call for call in failed if call.start > back_at], [
        f"{call.op} {call.start - back_at:+.3f}s after the server was back: {call.error!r}"
        for call in failed
        if call.start > back_at
    ]
    for worker in load.workers:
        assert len([call for call in worker.calls if call.start > back_at]) >= 10
    # Calls during the outage failed with an error that says the database is unreachable, and
    # that does not show the values written.
    if calls_during_restart:
        assert failed
    for call in failed:
        assert isinstance(call.error, DBAPIError), repr(call.error)
        assert is_unavailable(call.error), repr(call.error)
        assert "secret-" not in str(call.error)

    # No acknowledged write is lost. Each key holds the last value whose set returned, or a
    # later one whose set failed after reaching the server. A read right after a set that
    # returned sees its value.
    for worker in load.workers:
        attempts: dict[str, list[Call]] = {}
        for call in worker.calls:
            if call.op == "set":
                attempts.setdefault(call.key, []).append(call)
            elif call.error is None and attempts[call.key][-1].error is None:
                assert call.value == attempts[call.key][-1].value, call
        for key, sets in attempts.items():
            returned = [i for i, call in enumerate(sets) if call.error is None]
            possible = [call.value for call in sets[returned[-1] if returned else 0 :]]
            if not returned:
                possible.append(None)
            assert backend.get(scope, key) in possible, (key, sets[returned[-1] if returned else 0 :])


def test_statement_errors_do_not_count_as_an_unreachable_database(
    backend, scope, make_dag_run, unique, db_kind
):
    """Only an unreachable database may be answered with "try again later": never a bug of ours."""
    from datetime import UTC, datetime

    from airflow import settings
    from airflow_task_state.airflow_db.engine import execute, is_unavailable
    from airflow_task_state.metastore.models import TaskStateModel
    from sqlalchemy import insert, text
    from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

    backend.set(scope, "k", "v")
    row = {
        "dag_run_id": make_dag_run(f"dag_{unique}", "run_1"),
        "task_id": scope.task_id,
        "map_index": -1,
        "key": "k",
        "dag_id": scope.dag_id,
        "run_id": scope.run_id,
        "value": "secret-duplicate",
        "updated_at": datetime.now(UTC),
        "updated_by_try": None,
        "version": 1,
        "expires_at": None,
    }
    errors = []
    with pytest.raises(IntegrityError) as duplicate:
        execute(insert(TaskStateModel.__table__), row)
    errors.append(duplicate.value)
    # A syntax error, and a missing table: SQLite reports both as OperationalError.
    for statement in ("SELEC 1", "SELECT 1 FROM no_such_table"):
        with pytest.raises(DBAPIError) as failure:
            execute(text(statement), {})
        errors.append(failure.value)
    # A statement cancelled for running too long: an OperationalError on PostgreSQL and MariaDB.
    cancelled = {
        "postgres": ["SET LOCAL statement_timeout = 10", "SELECT pg_sleep(2)"],
        "mysql": ["SET STATEMENT max_statement_time = 0.01 FOR SELECT SLEEP(2) FROM task_state"],
    }
    if db_kind in cancelled:
        with pytest.raises(OperationalError) as failure, settings.engine.connect() as connection:
            for statement in cancelled[db_kind]:
                connection.execute(text(statement))
        errors.append(failure.value)
    for error in errors:
        assert not error.connection_invalidated, repr(error)
        assert not is_unavailable(error), repr(error)
    assert not is_unavailable(ValueError("connection refused"))
    # The connections went back in working order.
    assert backend.get(scope, "k") == "v"


def test_a_refused_connection_counts_as_an_unreachable_database(db_kind):
    if db_kind == "sqlite":
        pytest.skip("SQLite has no server to refuse a connection")
    from airflow import settings
    from airflow_task_state.airflow_db.engine import is_unavailable
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError
    from state_testing import dbservers

    nowhere = create_engine(make_url(settings.SQL_ALCHEMY_CONN).set(port=dbservers.free_port()))
    with pytest.raises(OperationalError) as failure:
        nowhere.connect()
    nowhere.dispose()
    assert not failure.value.connection_invalidated
    assert is_unavailable(failure.value), repr(failure.value)
