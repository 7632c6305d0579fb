"""
MetastoreStateBackend against the floor, measured side by side in one run.

The floor is the same upsert and select the backend sends, executed with the DBAPI driver on one
open autocommit connection: no pool, no SQLAlchemy, nothing but the statement. The backend goes
through Airflow's configured engine exactly as task code would. Rounds alternate between the two
so that drift on the machine hits both alike.

    uv run python bench/bench_metastore.py [--db postgres|mysql|sqlite] [--ops 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "dev"))

TARGETS = {"set": 0.6, "get": 0.5}


def ops_per_second(operation: Callable[[int], object], ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        operation(i)
    return ops / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=("postgres", "mysql", "sqlite"), default="postgres")
    parser.add_argument("--ops", type=int, default=2000, help="operations per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import dbservers
    from conftest_helpers import run_airflow

    with ExitStack() as stack:
        home = Path(tempfile.mkdtemp(prefix="state-bench-"))
        if args.db == "postgres":
            # Server defaults (fsync and synchronous_commit on): what a deployment runs.
            url = stack.enter_context(dbservers.postgres_server())
        else:
            url = stack.enter_context(dbservers.database(args.db, home))
        os.environ.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            }
        )
        run_airflow("db", "migrate")
        run(args)


def run(args: argparse.Namespace) -> None:
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.state import _statements as sql
    from airflow.state.metastore import MetastoreStateBackend
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from airflow_shared.state import TaskScope

    with create_session() as session:
        session.add(
            DagRun(dag_id="bench", run_id="run", run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
        )
    scope = TaskScope("bench", "run", "task")
    backend = MetastoreStateBackend()
    dialect = settings.engine.dialect
    keys = [f"key_{i % 100}" for i in range(args.ops)]

    # The floor: the backend's own statements, compiled once, run on one raw DBAPI connection
    # with their parameters prepared before the clock starts.
    from datetime import datetime, timezone

    upsert = sql.upsert(dialect.name, TaskScope).compile(dialect=dialect)
    select = sql.select_value(TaskScope).compile(dialect=dialect)
    raw = settings.engine.raw_connection()
    if args.db == "sqlite":
        raw.driver_connection.isolation_level = None  # autocommit
    else:
        raw.driver_connection.autocommit = True
    cursor = raw.cursor()

    def driver_params(compiled, values):
        # The type processing SQLAlchemy would apply (keys as bytes on MySQL, datetimes).
        processors = compiled._bind_processors
        bound = compiled.construct_params(values)
        bound = {k: processors[k](v) if k in processors else v for k, v in bound.items()}
        return tuple(bound[n] for n in compiled.positiontup) if compiled.positional else bound

    now = datetime.now(timezone.utc)
    upsert_params = [
        driver_params(
            upsert, {**sql.params(scope, k), "value": f"value-{i}", "updated_at": now, "updated_by_try": None}
        )
        for i, k in enumerate(keys)
    ]
    select_params = [driver_params(select, sql.params(scope, k)) for k in keys]
    upsert_sql, select_sql = str(upsert), str(select)

    def floor_set(i: int) -> None:
        cursor.execute(upsert_sql, upsert_params[i])
        cursor.fetchall() if cursor.description else None

    def floor_get(i: int) -> None:
        cursor.execute(select_sql, select_params[i])
        cursor.fetchall()

    def backend_set(i: int) -> None:
        backend.set(scope, keys[i], f"value-{i}")

    def backend_get(i: int) -> None:
        backend.get(scope, keys[i])

    # Warm both sides (pool, statement caches) before measuring.
    for i in range(200):
        floor_set(i), floor_get(i), backend_set(i), backend_get(i)

    results: dict[str, dict[str, list[float]]] = {op: {"floor": [], "backend": []} for op in ("set", "get")}
    for _ in range(args.rounds):
        for op, floor, ours in (("set", floor_set, backend_set), ("get", floor_get, backend_get)):
            results[op]["floor"].append(ops_per_second(floor, args.ops))
            results[op]["backend"].append(ops_per_second(ours, args.ops))
    raw.close()

    print(
        f"\nMetastoreStateBackend vs floor on {args.db} ({dialect.driver}), "
        f"{args.rounds} rounds x {args.ops} ops, medians"
    )
    print(f"{'op':<5}{'floor ops/s':>14}{'backend ops/s':>16}{'ratio':>8}{'target':>8}")
    for op, sides in results.items():
        floor, ours = statistics.median(sides["floor"]), statistics.median(sides["backend"])
        target = TARGETS[op] if args.db == "postgres" else None
        goal = "" if target is None else f">= {target}"
        print(f"{op:<5}{floor:>14.0f}{ours:>16.0f}{ours / floor:>8.2f}{goal:>8}")


if __name__ == "__main__":
    main()
