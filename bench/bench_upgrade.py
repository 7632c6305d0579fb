"""
The upgrade to Airflow 3.3 on PostgreSQL: how long Airflow 3.3's `airflow db migrate` takes on a 3.2
database holding --rows task state rows and --asset-rows asset state rows, which our chain's
revision 0114 moves into Airflow's state store (docs/upgrading.md).

Airflow 3.2 with airflow-task-state migrates a new database; the rows are inserted with INSERT ...
SELECT generate_series over 100 dag runs, 10 tasks, 10 map indexes (values: a small JSON object
with non-ASCII text; every key expires in 30 days, so every key moves). Then Airflow 3.3 (the cached
environment of the upgrade tests) runs, each command timed as a whole process, as a deployer runs it:

1. `airflow db migrate`: Airflow's migrations from 3.2 to 3.3, then the move;
2. `airflow state-db downgrade -r c4a8f2d60113 -y`: the first step of a rollback, every key copied
   back into our 3.2 tables (Airflow's store is then emptied, so that the next move starts afresh);
3. `airflow db migrate` again: the move alone (Airflow's schema is already 3.3's);
4. `airflow db migrate` once more: nothing to do, the commands' own start-up.

After 1 and 3 every key must be in Airflow's store, with its meta row, and our tables gone.

    PYTHONPATH=dev uv run python bench/bench_upgrade.py [--rows 100000] [--asset-rows 10000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import create_dag_run, use_migrated_airflow

RUNS, TASKS, MAP_INDEXES, ASSETS = 100, 10, 10, 100
#: The revision of airflow-task-state 0.2 to 0.7 on Airflow 3.2: where a rollback to 3.2 goes.
BEFORE_THE_MOVE = "c4a8f2d60113"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--asset-rows", type=int, default=10_000)
    args = parser.parse_args()
    from state_testing import dbservers

    with ExitStack() as stack:
        url = stack.enter_context(dbservers.postgres_server())
        use_migrated_airflow(url)
        run(args, url)


def fill(rows: int, asset_rows: int) -> float:
    """Insert the rows of ours to move; return the seconds it took."""
    from airflow import settings
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import text

    start = time.perf_counter()
    for run in range(RUNS):
        create_dag_run("bench_upgrade", f"run_{run}")
    with create_session() as session:
        session.add_all(AssetModel(name=f"asset_{i}", uri=f"s3://bench/{i}") for i in range(ASSETS))
    per_scope = max(1, rows // (RUNS * TASKS * MAP_INDEXES))
    # Bound, not inlined: text() would read the ":false" inside the JSON as a parameter.
    value = "(:head || g || :tail)"
    pieces = {"head": '{"city":"Zürich","offset":', "tail": ',"done":false}'}
    with settings.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO task_state (dag_run_id, task_id, map_index, key, dag_id, run_id, value, "
                "updated_at, version, expires_at) "
                "SELECT r.id, 'task_' || (g / :per_scope % :tasks), g / :per_scope / :tasks % :maps, "
                f"'key/' || g, r.dag_id, r.run_id, {value}, now(), 1, now() + interval '30 days' "
                "FROM generate_series(0, :rows - 1) g "
                "JOIN (SELECT id, dag_id, run_id, row_number() OVER (ORDER BY id) - 1 AS n FROM dag_run) r "
                "ON r.n = g / (:per_scope * :tasks * :maps)"
            ),
            {"rows": rows, "per_scope": per_scope, "tasks": TASKS, "maps": MAP_INDEXES, **pieces},
        )
        conn.execute(
            text(
                "INSERT INTO asset_state (asset_id, key, value, updated_at, version, updated_by) "
                f"SELECT a.id, 'watermark/' || g, {value}, now(), 1, 'api' "
                "FROM generate_series(0, :rows - 1) g "
                "JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM asset) a ON a.n = g % :assets"
            ),
            {"rows": asset_rows, "assets": ASSETS, **pieces},
        )
        counted = conn.execute(text("SELECT count(*) FROM task_state")).scalar()
    if counted != rows:
        raise SystemExit(f"filled {counted} task_state rows, expected {rows}: use a multiple of {RUNS * 100}")
    return time.perf_counter() - start


def counts() -> dict[str, int | None]:
    """Rows per table (None: no such table)."""
    from airflow import settings
    from sqlalchemy import inspect, text

    tables = ("task_state", "asset_state", "task_state_store", "asset_state_store")
    tables += ("task_state_meta", "asset_state_meta")
    with settings.engine.begin() as conn:
        existing = set(inspect(conn).get_table_names())
        return {
            name: conn.execute(text(f"SELECT count(*) FROM {name}")).scalar() if name in existing else None
            for name in tables
        }


def check_moved(rows: int, asset_rows: int, when: str) -> None:
    found = counts()
    wanted = {
        **{"task_state": None, "asset_state": None},
        **{"task_state_store": rows, "task_state_meta": rows},
        **{"asset_state_store": asset_rows, "asset_state_meta": asset_rows},
    }
    if found != wanted:
        raise SystemExit(f"{when}: the tables hold {found}, expected {wanted}")


def run(args, url: str) -> None:
    from airflow import settings
    from sqlalchemy import text
    from state_testing.airflow33 import airflow33

    seconds = fill(args.rows, args.asset_rows)
    print(f"fill (Airflow 3.2): {args.rows} task rows, {args.asset_rows} asset rows in {seconds:.1f} s")
    started = time.perf_counter()
    environment = airflow33()
    seconds = time.perf_counter() - started
    print(
        f"Airflow 3.3 environment: {seconds:.1f} s (of which building it: {environment.build_seconds:.1f} s)"
    )
    env = environment.env(url, Path(tempfile.mkdtemp(prefix="bench-upgrade-33-")))

    def timed(label: str, *command: str) -> None:
        started = time.perf_counter()
        environment.run("airflow", *command, env=env, timeout=3600)
        print(f"{label:<58} {time.perf_counter() - started:>7.1f} s")

    total = args.rows + args.asset_rows
    print(f"\nAirflow 3.3, {total} keys ({args.rows} task, {args.asset_rows} asset):")
    timed("1. airflow db migrate (Airflow 3.2 -> 3.3, then the move)", "db", "migrate")
    check_moved(args.rows, args.asset_rows, "after the upgrade")
    timed(
        "2. airflow state-db downgrade (every key copied back)",
        "state-db",
        "downgrade",
        "-r",
        BEFORE_THE_MOVE,
        "-y",
    )
    found = counts()
    if (found["task_state"], found["asset_state"]) != (args.rows, args.asset_rows):
        raise SystemExit(f"after the downgrade: the tables hold {found}")
    with settings.engine.begin() as conn:
        conn.execute(text("DELETE FROM task_state_store"))
        conn.execute(text("DELETE FROM asset_state_store"))
    timed("3. airflow db migrate (the move alone)", "db", "migrate")
    check_moved(args.rows, args.asset_rows, "after the second move")
    timed("4. airflow db migrate (nothing to do: start-up)", "db", "migrate")


if __name__ == "__main__":
    main()
