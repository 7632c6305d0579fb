"""
MetastoreStateBackend against the floor, measured side by side in one run.

The floor is the same upsert and select the backend sends, executed with the DBAPI driver on one
open autocommit connection, their parameters prepared before the clock starts: no pool, no
SQLAlchemy, nothing but the statement. The backend goes through Airflow's configuration exactly
as server code would. PostgreSQL runs with its default durability settings.

On Airflow 3.3, where this package keeps its keys in Airflow's own ``task_state_store`` (and its
versions and writers beside them), it measures instead Airflow 3.3.2's own ``MetastoreBackend``
against this package's backend, on the same tables: ``--airflow33`` runs it with the Python of the
cached Airflow 3.3.2 environment (``dev/state_testing/airflow33.py``, this tree's distributions in it).

On PostgreSQL, on Airflow 3.2, it also measures the state API's calls on the event loop (a
running try's versioned read and its set that checks the try, ``[state] event_loop_statements``)
against the same statements on one open asyncpg connection, in one coroutine per round.

On MariaDB (``--db mysql``), on Airflow 3.2, it also measures the two write paths side by side:
RETURNING, which MariaDB 10.5+ takes, and LAST_INSERT_ID, which MySQL 8 takes (forced here, as no
MySQL server runs on this machine): set, increment, write(if_version=0) of a new key and a 10-key
set_many.

    PYTHONPATH=dev uv run python bench/bench_metastore.py [--db postgres|mysql|sqlite] \
        [--ops 2000] [--rounds 5] [--airflow33]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from _common import create_dag_run, measure, parse_args, use_migrated_airflow
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

# Issue 33: the backend at least 0.9 of the same statements on a raw cursor.
TARGETS = {"set": 0.9, "get": 0.9}


def main() -> None:
    parser = parse_args(__doc__, ops=2000)
    parser.add_argument("--db", choices=("postgres", "mysql", "sqlite"), default="postgres")
    parser.add_argument("--airflow33", action="store_true", help="on Airflow 3.3.2: its backend against ours")
    args = parser.parse_args()
    if args.airflow33 and not AIRFLOW_HAS_STATE_STORE:
        from state_testing.airflow33 import airflow33

        python = str(airflow33().python)
        os.execv(python, [python, *sys.argv])
    from state_testing import dbservers

    with ExitStack() as stack:
        if args.db == "postgres":
            url = stack.enter_context(dbservers.postgres_server())
        else:
            url = stack.enter_context(dbservers.database(args.db, Path(tempfile.mkdtemp())))
        use_migrated_airflow(url)
        beside_airflow33(args) if AIRFLOW_HAS_STATE_STORE else run(args)


def run(args) -> None:
    from airflow import settings
    from airflow_shared.state import TaskScope
    from airflow_task_state.metastore import MetastoreStateBackend
    from airflow_task_state.metastore import statements as sql

    create_dag_run("bench", "run")
    scope = TaskScope("bench", "run", "task")
    backend = MetastoreStateBackend()
    dialect = settings.engine.dialect
    keys = [f"key_{i % 100}" for i in range(args.ops)]

    upsert = sql.for_scope(scope).upsert.compile(dialect=dialect)
    select = sql.for_scope(scope).select_value.compile(dialect=dialect)
    raw = settings.engine.raw_connection()
    dialect.set_isolation_level(raw.dbapi_connection, "AUTOCOMMIT")
    cursor = raw.cursor()

    def driver_params(compiled, values):
        # The type processing SQLAlchemy would apply (keys as bytes on MySQL, datetimes).
        processors = compiled._bind_processors
        bound = compiled.construct_params(values)
        bound = {k: processors[k](v) if k in processors else v for k, v in bound.items()}
        return tuple(bound[n] for n in compiled.positiontup) if compiled.positional else bound

    now = datetime.now(UTC)
    upsert_params = [
        driver_params(
            upsert,
            {
                **sql.params(scope, k),
                "value": f"value-{i}",
                "updated_at": now,
                "updated_by_try": None,
                "expires_at": None,
                "now": now,
            },
        )
        for i, k in enumerate(keys)
    ]
    select_params = [driver_params(select, {**sql.params(scope, k), "now": now}) for k in keys]
    upsert_sql, select_sql = str(upsert), str(select)

    def floor_set(i: int) -> None:
        cursor.execute(upsert_sql, upsert_params[i])
        cursor.fetchall()  # the version it returns, as the backend reads it (SQLite ends the statement here)

    def floor_get(i: int) -> None:
        cursor.execute(select_sql, select_params[i])
        cursor.fetchall()

    medians = measure(
        {
            "set": {"floor": floor_set, "backend": lambda i: backend.set(scope, keys[i], f"value-{i}")},
            "get": {"floor": floor_get, "backend": lambda i: backend.get(scope, keys[i])},
        },
        args.ops,
        args.rounds,
    )
    raw.close()
    if args.db == "mysql":
        compare_write_paths(args, scope)

    print(
        f"\nMetastoreStateBackend vs floor on {args.db} ({dialect.driver}), "
        f"{args.rounds} rounds x {args.ops} ops, medians"
    )
    print(f"{'op':<5}{'floor ops/s':>14}{'backend ops/s':>16}{'ratio':>8}{'target':>8}")
    for op, by_side in medians.items():
        floor, ours = by_side["floor"], by_side["backend"]
        goal = f">= {TARGETS[op]}" if args.db == "postgres" else ""
        print(f"{op:<5}{floor:>14.0f}{ours:>16.0f}{ours / floor:>8.2f}{goal:>8}")
    if args.db == "postgres":
        asyncio.run(on_the_event_loop(args))


async def on_the_event_loop(args) -> None:
    """The state API's calls on the event loop against the same statements on one asyncpg connection."""
    import asyncpg
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow_shared.state import StateWriter, TaskScope
    from airflow_task_state.airflow_db import event_loop
    from airflow_task_state.airflow_db.engine import compiled_for
    from airflow_task_state.metastore import MetastoreStateBackend
    from airflow_task_state.metastore import operations as op
    from sqlalchemy import insert, select

    with create_session() as session:
        session.execute(
            insert(TaskInstance).values(
                dag_id="bench",
                run_id="run",
                task_id="running",
                map_index=-1,
                pool="default_pool",
                state="running",
                try_number=1,
            )
        )
        ti_id = str(session.scalar(select(TaskInstance.id).where(TaskInstance.task_id == "running")))
    scope, backend = TaskScope("bench", "run", "running"), MetastoreStateBackend()
    writer = StateWriter.task_try("bench", "run", "running", -1, 1)
    keys = [f"key_{i % 100}" for i in range(args.ops)]
    event_loop.serve_here()  # as the API server does: connections kept between statements
    # The floor's statements and parameters, compiled and converted before the clock starts.
    engine = event_loop._engine().engine

    def write_operation(i: int):  # the one statement of the backend's write
        return next(op.write_while_running(scope, keys[i], f"value-{i}", writer, None, ti_id))

    write, read = write_operation(0).statement.returning, op.get_versioned(scope, keys[0]).statement
    compiled_write, compiled_read = compiled_for(write, engine.dialect), compiled_for(read, engine.dialect)
    write_params = [compiled_write.parameters(write_operation(i).values) for i in range(args.ops)]
    read_params = [compiled_read.parameters(op.get_versioned(scope, k).values) for k in keys]
    connection = await asyncpg.connect(settings.SQL_ALCHEMY_CONN.replace("postgresql+psycopg2", "postgresql"))

    async def floor_set(i: int) -> None:
        await connection.fetch(compiled_write.sql, *write_params[i])

    async def floor_get(i: int) -> None:
        await connection.fetch(compiled_read.sql, *read_params[i])

    sides = {
        "set": {
            "floor": floor_set,
            "backend": lambda i: backend.write_while_running_on_event_loop(
                scope, keys[i], f"value-{i}", writer, None, ti_id
            ),
        },
        "get": {"floor": floor_get, "backend": lambda i: backend.get_versioned_on_event_loop(scope, keys[i])},
    }
    samples: dict[str, dict[str, list[float]]] = {name: {"floor": [], "backend": []} for name in sides}
    for round_ in range(args.rounds + 1):  # the first round warms both sides up, unrecorded
        for name, by_side in sides.items():
            for side, call in by_side.items():
                start = time.perf_counter()
                for i in range(args.ops):
                    await call(i)
                if round_:
                    samples[name][side].append(args.ops / (time.perf_counter() - start))
    await connection.close()
    await event_loop.dispose()
    print(f"\nOn the event loop (asyncpg), {args.rounds} rounds x {args.ops} ops, medians")
    print(f"{'op':<5}{'floor ops/s':>14}{'backend ops/s':>16}{'ratio':>8}")
    for name, by_side in samples.items():
        floor, ours = statistics.median(by_side["floor"]), statistics.median(by_side["backend"])
        print(f"{name:<5}{floor:>14.0f}{ours:>16.0f}{ours / floor:>8.2f}")


def beside_airflow33(args) -> None:
    """Airflow 3.3.2's MetastoreBackend against ours, each on a task of the same dag run."""
    from airflow._shared.state import TaskScope as AirflowTaskScope
    from airflow.state.metastore import MetastoreBackend
    from airflow_shared.state import TaskScope
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    theirs, their_scope = MetastoreBackend(), AirflowTaskScope("bench", "run", "airflow")
    ours, our_scope = MetastoreStateBackend(), TaskScope("bench", "run", "ours")
    keys = [f"key_{i % 100}" for i in range(args.ops)]
    medians = measure(
        {
            "set": {
                "3.3.2": lambda i: theirs.set(their_scope, keys[i], f"value-{i}"),
                "ours": lambda i: ours.set(our_scope, keys[i], f"value-{i}"),
            },
            "get": {
                "3.3.2": lambda i: theirs.get(their_scope, keys[i]),
                "ours": lambda i: ours.get(our_scope, keys[i]),
            },
        },
        args.ops,
        args.rounds,
    )
    print(
        f"\nAirflow 3.3.2's MetastoreBackend vs ours on 3.3.2, on {args.db}, "
        f"{args.rounds} rounds x {args.ops} ops, medians"
    )
    print(f"{'op':<5}{'3.3.2 ops/s':>14}{'ours ops/s':>14}{'ratio':>8}")
    for op, by_side in medians.items():
        theirs_per_s, ours_per_s = by_side["3.3.2"], by_side["ours"]
        print(f"{op:<5}{theirs_per_s:>14.0f}{ours_per_s:>14.0f}{ours_per_s / theirs_per_s:>8.2f}")


def compare_write_paths(args, scope) -> None:
    """RETURNING against LAST_INSERT_ID on the same server, rounds alternating between them."""
    from airflow_task_state.metastore import MetastoreStateBackend

    paths = {path: MetastoreStateBackend(write_path=path) for path in ("returning", "last_insert_id")}
    batch = {f"batch_{n}": "v" for n in range(10)}

    def sides(call):
        return {path: (lambda i, backend=backend: call(backend, i)) for path, backend in paths.items()}

    # A fresh key per create: each path's keys apart (the rounds reuse the index i).
    created = {path: iter(range(10**9)) for path in paths}
    medians = measure(
        {
            "set": sides(lambda backend, i: backend.set(scope, f"key_{i % 100}", f"value-{i}")),
            "increment": sides(lambda backend, i: backend.increment(scope, "counter")),
            "create": {
                path: (
                    lambda i, backend=backend, path=path: backend.write(
                        scope, f"new_{path}_{next(created[path])}", "v", if_version=0
                    )
                )
                for path, backend in paths.items()
            },
            "set_many(10)": sides(lambda backend, i: backend.set_many(scope, batch)),
        },
        args.ops,
        args.rounds,
    )
    print(f"\nWrite paths on {args.db}, {args.rounds} rounds x {args.ops} ops, medians (ops/s)")
    print(f"{'op':<14}{'RETURNING':>12}{'LAST_INSERT_ID':>16}{'ratio':>8}")
    for op, by_path in medians.items():
        returning, last_insert_id = by_path["returning"], by_path["last_insert_id"]
        print(f"{op:<14}{returning:>12.0f}{last_insert_id:>16.0f}{last_insert_id / returning:>8.2f}")


if __name__ == "__main__":
    main()
