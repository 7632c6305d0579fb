"""
MetastoreStateBackend under real contention: several processes (not threads: each has its own
connections, as separate task processes do) on the database of the run.

The counts are small so that each database takes a few seconds; ``bench/bench_atomic.py`` runs
the issue's full 8 processes x 500 increments. On MariaDB each test runs twice: on the server's
path (RETURNING) and on MySQL's (LAST_INSERT_ID, which MySQL 8 needs and no server here runs).
"""

from __future__ import annotations

import json
import multiprocessing
import queue
from collections.abc import Callable
from typing import Any

import pytest
from airflow_shared.state import AssetScope, StateScope, TaskScope
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

PROCESSES = 4
INCREMENTS = 50
APPENDS = 20
ROUNDS = 5

#: The write path of the backends the workers build (forked: they see the test's value).
WRITE_PATH: str | None = None


@pytest.fixture(autouse=True, params=[None, "last_insert_id"], ids=["server_path", "mysql_path"])
def _write_path(request, db_kind, monkeypatch) -> None:
    if request.param is not None and db_kind != "mysql":
        pytest.skip("MySQL's write path runs on MariaDB only: --db mysql")
    if request.param is not None and AIRFLOW_HAS_STATE_STORE:
        pytest.skip("Airflow 3.3's metastore has one write path")
    monkeypatch.setitem(globals(), "WRITE_PATH", request.param)


def _backend():
    from airflow_task_state.metastore import MetastoreStateBackend

    # Airflow 3.3's metastore has one write path: it takes no argument.
    return MetastoreStateBackend() if WRITE_PATH is None else MetastoreStateBackend(write_path=WRITE_PATH)


def count(scope: StateScope, operations: int, barrier: Any, out: Any, n: int) -> None:
    backend = _backend()
    barrier.wait()
    out.put([backend.increment(scope, "hits") for _ in range(operations)])


def append(scope: StateScope, appends: int, barrier: Any, out: Any, n: int) -> None:
    """What task_state.update(key, fn) does: read, change, write only over the version read."""
    from airflow_task_state.exceptions import StateConflictError

    backend = _backend()
    barrier.wait()
    conflicts = 0
    for i in range(appends):
        while True:
            stored = backend.get_versioned(scope, "log")
            items = json.loads(stored.value) if stored else []
            try:
                backend.write(
                    scope, "log", json.dumps([*items, f"{n}-{i}"]), if_version=stored.version if stored else 0
                )
                break
            except StateConflictError:
                conflicts += 1
    out.put(conflicts)


def contend(scope: StateScope, rounds: int, barrier: Any, out: Any, n: int) -> None:
    """Each round every process reads the same version, then all write over it at once."""
    from airflow_task_state.exceptions import StateConflictError

    backend = _backend()
    results = []
    for _ in range(rounds):
        barrier.wait()
        stored = backend.get_versioned(scope, "leader")
        barrier.wait()  # nobody writes before everybody has read
        try:
            backend.write(scope, "leader", f"writer-{n}", if_version=stored.version if stored else 0)
            results.append((stored.version if stored else 0, "won"))
        except StateConflictError as conflict:
            results.append((conflict.expected, conflict.stored))
        barrier.wait()  # nobody reads the next round before everybody has written
    out.put(results)


def in_processes(target: Callable[..., None], processes: int, *args: Any) -> list[Any]:
    """Run *target* in *processes* forked processes at once; return what each put in its queue."""
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=target, args=(*args, barrier, out, n), daemon=True) for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    results = []
    try:
        for _ in workers:
            results.append(out.get(timeout=120))
    except queue.Empty:
        pytest.fail(f"a worker failed: exit codes {[w.exitcode for w in workers]}")
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    return results


@pytest.fixture
def task(make_dag_run, unique) -> TaskScope:
    make_dag_run(f"dag_{unique}", "run")
    return TaskScope(f"dag_{unique}", "run", "task")


@pytest.fixture
def asset(make_asset) -> AssetScope:
    return AssetScope(make_asset(1))


@pytest.mark.parametrize("scope_name", ["task", "asset"])
def test_concurrent_increments_in_processes_lose_nothing(request, scope_name):
    scope = request.getfixturevalue(scope_name)
    returned = [n for mine in in_processes(count, PROCESSES, scope, INCREMENTS) for n in mine]
    total = PROCESSES * INCREMENTS
    assert _backend().get_versioned(scope, "hits").value == str(total)
    # Each increment got its own result: none saw another's.
    assert sorted(returned) == list(range(1, total + 1))


def test_concurrent_read_modify_write_appends_in_processes_lose_nothing(task):
    conflicts = in_processes(append, PROCESSES, task, APPENDS)
    stored = _backend().get_versioned(task, "log")
    expected = {f"{n}-{i}" for n in range(PROCESSES) for i in range(APPENDS)}
    items = json.loads(stored.value)
    assert sorted(items) == sorted(expected)
    assert stored.version == len(expected)  # exactly one successful write per element
    assert sum(conflicts) > 0  # they really raced


@pytest.mark.parametrize("scope_name", ["task", "asset"])
def test_concurrent_if_version_writers_in_processes_one_wins_each_round(request, scope_name):
    scope = request.getfixturevalue(scope_name)
    results = in_processes(contend, PROCESSES, scope, ROUNDS)
    for round_number in range(ROUNDS):
        outcomes = [mine[round_number] for mine in results]
        # Round 0 creates the key (if_version=0); round r writes over version r.
        assert {expected for expected, _ in outcomes} == {round_number}
        assert [outcome for _, outcome in outcomes].count("won") == 1, outcomes
        assert {outcome for _, outcome in outcomes if outcome != "won"} == {round_number + 1}
    assert _backend().get_versioned(scope, "leader").version == ROUNDS


def write_batches(scope: StateScope, batches: int, barrier: Any, out: Any, n: int) -> None:
    backend = _backend()
    barrier.wait()
    out.put([backend.set_many(scope, {"a": f"{n}-{i}", "b": f"{n}-{i}"}) for i in range(batches)])


@pytest.mark.parametrize("scope_name", ["task", "asset"])
def test_concurrent_batches_in_processes_each_hand_back_their_own_versions(request, scope_name):
    """A batch's versions are those it wrote: none is another writer's, none is handed out twice."""
    scope = request.getfixturevalue(scope_name)
    returned = [
        versions for mine in in_processes(write_batches, PROCESSES, scope, ROUNDS) for versions in mine
    ]
    total = PROCESSES * ROUNDS
    for key in ("a", "b"):
        assert sorted(versions[key] for versions in returned) == list(range(1, total + 1))
    # Each batch wrote both keys at once: the same number of writes came before each.
    assert all(versions["a"] == versions["b"] for versions in returned)
