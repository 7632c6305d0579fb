"""
Where a set's time goes on Airflow 3.3 with PostgreSQL: Airflow 3.3.2's own ``MetastoreBackend``
and this package's backend, each writing the same keys of its own task of one dag run. For each:
the client's wall time per set, the statements the server ran (``pg_stat_statements``, utility
statements such as BEGIN and COMMIT included) with their server time (planning + execution), and
the WAL flushes (``pg_stat_wal``: a COMMIT waits for one with the default ``synchronous_commit``).
What is left of the wall time is the client (Python, the driver) and the round trips.

    PYTHONPATH=dev uv run python bench/profile_writes_airflow33.py [--ops 500] [--synchronous-commit off]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--synchronous-commit", default="on", choices=("on", "off"))
    args = parser.parse_args()
    if not AIRFLOW_HAS_STATE_STORE:
        from state_testing.airflow33 import airflow33

        python = str(airflow33().python)
        os.execv(python, [python, *sys.argv])
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import use_migrated_airflow
    from state_testing import dbservers

    settings = {
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track_utility": "on",
        "pg_stat_statements.track_planning": "on",
        "track_wal_io_timing": "on",
        "synchronous_commit": args.synchronous_commit,
    }
    with dbservers.postgres_server(settings) as url:
        use_migrated_airflow(url)
        profile(args.ops, args.synchronous_commit)


def profile(ops: int, synchronous_commit: str) -> None:
    import psycopg2
    from _common import create_dag_run
    from airflow import settings
    from airflow._shared.state import TaskScope as AirflowTaskScope
    from airflow.state.metastore import MetastoreBackend
    from airflow_shared.state import TaskScope
    from airflow_task_state.airflow_db.engine import autocommit_engine
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    # The observer's own connection (its statements are left out of the counts below).
    observer = psycopg2.connect(
        settings.engine.url.render_as_string(hide_password=False).replace("+psycopg2", "")
    )
    observer.autocommit = True
    cursor = observer.cursor()
    cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    theirs, their_scope = MetastoreBackend(), AirflowTaskScope("bench", "run", "airflow")
    ours, our_scope = MetastoreStateBackend(), TaskScope("bench", "run", "ours")
    sides = {
        "3.3.2": lambda i: theirs.set(their_scope, f"key_{i % 100}", f"value-{i}"),
        "ours": lambda i: ours.set(our_scope, f"key_{i % 100}", f"value-{i}"),
        # The path of the writes that read first (if_version, increment): a transaction, two round trips.
        "ours, as a transaction": lambda i: ours._write(
            our_scope, [f"key_{i % 100}"], lambda key, _: f"value-{i}", None, None, None
        ),
    }
    print(f"PostgreSQL, synchronous_commit={synchronous_commit}, {ops} sets per side")
    for side, operation in sides.items():
        for i in range(200):
            operation(i)
        cursor.execute("SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')")
        started = time.perf_counter()
        for i in range(ops):
            operation(i)
        wall_ms = (time.perf_counter() - started) * 1000 / ops
        # A backend reports its WAL counts when idle for a while, or as it exits: close them all.
        settings.engine.dispose()
        autocommit_engine().dispose()
        time.sleep(1)
        cursor.execute(
            "SELECT calls, total_plan_time, total_exec_time, "
            "left(regexp_replace(query, '\\s+', ' ', 'g'), 90) "
            "FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC"
        )
        statements = cursor.fetchall()
        cursor.execute("SELECT wal_sync, wal_sync_time, wal_write FROM pg_stat_wal")
        syncs, sync_ms, writes = cursor.fetchone()
        plan_ms = sum(plan for _, plan, _, _ in statements) / ops
        server_ms = plan_ms + sum(total for _, _, total, _ in statements) / ops
        print(f"\n{side}: {1000 / wall_ms:.0f} sets/s, {wall_ms:.3f} ms a set")
        print(f"  server, statements: {server_ms:.3f} ms a set, {plan_ms:.3f} of it planning")
        flushes = f"{syncs / ops:.2f} a set"
        print(f"  WAL flushes: {flushes}, {sync_ms / ops:.3f} ms ({writes / ops:.2f} writes)")
        print(f"  left for the client and the round trips: {wall_ms - server_ms:.3f} ms a set")
        for calls, plan, total, query in statements:
            each = max(calls, 1)
            print(f"  {calls / ops:5.2f} x {plan / each:6.3f} + {total / each:6.3f} ms  {query}")


if __name__ == "__main__":
    main()
