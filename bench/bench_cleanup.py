"""
Clean-up of expired task state on PostgreSQL: how long removing --rows expired rows takes with a
given batch size, and what it does to reads and writes of other keys meanwhile.

The rows are inserted with one INSERT ... SELECT generate_series, expired a day ago, beside live
keys of another task instance. A separate process reads and writes those live keys in a loop
(``get`` then ``set``, each timed) twice: first alone ("before"), then while ``cleanup`` runs
("during"); their latencies are printed side by side.

    PYTHONPATH=dev uv run python bench/bench_cleanup.py [--rows 1000000] [--batch-size 1000 ...] \
        [--baseline-seconds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from contextlib import ExitStack

from _common import create_dag_run, use_migrated_airflow


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1000])
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    args = parser.parse_args()
    from state_testing import dbservers

    with ExitStack() as stack:
        use_migrated_airflow(stack.enter_context(dbservers.postgres_server()))
        run(args)


def fill(rows: int) -> float:
    """Insert *rows* expired task_state rows; return the seconds it took."""
    from airflow import settings
    from sqlalchemy import text

    start = time.perf_counter()
    with settings.engine.begin() as conn:
        dag_run_id = conn.execute(
            text("SELECT id FROM dag_run WHERE dag_id = 'bench' AND run_id = 'run'")
        ).scalar()
        conn.execute(
            text(
                "INSERT INTO task_state (dag_run_id, task_id, map_index, key, dag_id, run_id, value, "
                "updated_at, version, expires_at) "
                "SELECT :id, 'expired_task', g % 100, 'key_' || g, 'bench', 'run', '\"some value\"', "
                "now() - interval '2 days', 1, now() - interval '1 day' FROM generate_series(1, :rows) g"
            ),
            {"id": dag_run_id, "rows": rows},
        )
    with settings.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE task_state"))
    return time.perf_counter() - start


def load(stop, out) -> None:
    """Read and write live keys of another task until *stop* is set; send the latencies (ms)."""
    from airflow_shared.state import TaskScope
    from airflow_task_state.metastore import MetastoreStateBackend

    backend, scope = MetastoreStateBackend(), TaskScope("bench", "run", "live_task")
    reads, writes = [], []
    i = 0
    while not stop.is_set():
        key = f"live_{i % 100}"
        start = time.perf_counter()
        backend.get(scope, key)
        middle = time.perf_counter()
        backend.set(scope, key, f"value-{i}")
        reads.append((middle - start) * 1000)
        writes.append((time.perf_counter() - middle) * 1000)
        i += 1
    out.put((reads, writes))


def under_load(work) -> tuple[object, list[float], list[float]]:
    """Run *work()* while a load process runs; return its result and the load's latencies."""
    context = multiprocessing.get_context("fork")
    stop, out = context.Event(), context.Queue()
    worker = context.Process(target=load, args=(stop, out))
    worker.start()
    time.sleep(0.5)  # the load is under way before the work starts
    result = work()
    stop.set()
    reads, writes = out.get(timeout=120)
    worker.join()
    return result, reads, writes


def percentiles(latencies: list[float]) -> str:
    cuts = statistics.quantiles(latencies, n=100)
    worst = max(latencies)
    return f"p50 {cuts[49]:6.2f} ms  p99 {cuts[98]:6.2f} ms  max {worst:7.2f} ms  ({len(latencies)} ops)"


def run(args) -> None:
    from airflow._shared.timezones import timezone
    from airflow_shared.state import TaskScope
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    backend = MetastoreStateBackend()
    live = TaskScope("bench", "run", "live_task")
    for i in range(100):
        backend.set(live, f"live_{i}", "0")

    print(f"\nClean-up of {args.rows:,} expired task_state rows on PostgreSQL")
    _, reads, writes = under_load(lambda: time.sleep(args.baseline_seconds))
    print(f"before  read  {percentiles(reads)}")
    print(f"        write {percentiles(writes)}")
    for batch_size in args.batch_size:
        filled = fill(args.rows)
        print(f"\nbatch size {batch_size}: {args.rows:,} rows inserted in {filled:.1f}s")
        assert backend.cleanup(now=timezone.utcnow(), dry_run=True) == args.rows

        def clean(batch_size=batch_size) -> tuple[int, float]:
            start = time.perf_counter()
            removed = backend.cleanup(now=timezone.utcnow(), batch_size=batch_size)
            return removed, time.perf_counter() - start

        (removed, elapsed), reads, writes = under_load(clean)
        assert removed == args.rows, removed
        assert backend.keys(live) == sorted(f"live_{i}" for i in range(100))
        print(f"removed {removed:,} in {elapsed:.1f}s ({removed / elapsed:,.0f} rows/s)")
        print(f"during  read  {percentiles(reads)}")
        print(f"        write {percentiles(writes)}")


if __name__ == "__main__":
    main()
