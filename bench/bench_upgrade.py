"""
The move to Airflow 3.3 on PostgreSQL: how long `airflow-state-upgrade` takes for --rows task state
rows (and --asset-rows asset state rows), per batch size, and how long a second run (which finds
everything moved and writes nothing) takes.

Airflow 3.2 with airflow-task-state migrates a new database; the rows are inserted with INSERT ...
SELECT generate_series over 100 dag runs, 10 tasks, 10 map indexes (values: a small JSON object
with non-ASCII text, so every value is re-encoded); then Airflow 3.3 (the cached environment of the
upgrade tests) runs `airflow db migrate` on the same database and the command, timed as a whole
process, as a deployer runs it. Between batch sizes Airflow 3.3's tables are emptied and the mark
of a completed move is dropped.

    PYTHONPATH=dev uv run python bench/bench_upgrade.py [--rows 100000] [--asset-rows 10000] \
        [--batch-size 1000 5000 20000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import create_dag_run, use_migrated_airflow

RUNS, TASKS, MAP_INDEXES, ASSETS = 100, 10, 10, 100


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--asset-rows", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1000, 5000, 20000])
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


def run(args, url: str) -> None:
    from airflow import settings
    from sqlalchemy import text
    from state_testing.airflow33 import airflow33

    seconds = fill(args.rows, args.asset_rows)
    print(f"fill: {args.rows} task rows, {args.asset_rows} asset rows in {seconds:.1f} s")
    started = time.perf_counter()
    environment = airflow33()
    seconds = time.perf_counter() - started
    print(
        f"Airflow 3.3 environment: {seconds:.1f} s (of which building it: {environment.build_seconds:.1f} s)"
    )
    env = environment.env(url, Path(tempfile.mkdtemp(prefix="bench-upgrade-33-")))
    started = time.perf_counter()
    environment.run("airflow", "db", "migrate", env=env)
    print(f"Airflow 3.3 `airflow db migrate`: {time.perf_counter() - started:.1f} s")

    total = args.rows + args.asset_rows
    print(f"\n{'batch size':>10}  {'move (s)':>9}  {'rows/s':>8}  {'second run (s)':>14}")
    for batch_size in args.batch_size:
        with settings.engine.begin() as conn:
            conn.execute(text("DELETE FROM task_state_store"))
            conn.execute(text("DELETE FROM asset_state_store"))
            # The mark of a completed move: without it, the next run moves everything again.
            conn.execute(text("DROP TABLE IF EXISTS airflow_state_upgrade"))
        command = ("airflow-state-upgrade", "-o", "json", "--batch-size", str(batch_size))
        started = time.perf_counter()
        first = json.loads(environment.run(*command, env=env).stdout)
        move_seconds = time.perf_counter() - started
        started = time.perf_counter()
        second = json.loads(environment.run(*command, env=env).stdout)
        again_seconds = time.perf_counter() - started
        moved = sum(t["moved"] for t in first["tables"].values())
        unchanged = sum(t["unchanged"] for t in second["tables"].values())
        if moved != total or unchanged != total:
            raise SystemExit(f"moved {moved} and then found {unchanged} unchanged, expected {total}")
        print(f"{batch_size:>10}  {move_seconds:>9.1f}  {total / move_seconds:>8.0f}  {again_seconds:>14.1f}")


if __name__ == "__main__":
    main()
