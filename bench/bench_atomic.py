"""
Conditional writes and increments beside a plain set, measured side by side in one run; then
many processes incrementing one key at once.

Sides (ops/s, medians of alternating rounds, same keys of the same task instance):

- ``set``: ``backend.set`` (one upsert);
- ``write``: ``backend.write`` without a condition (the upsert that also returns the version);
- ``if_version``: ``backend.write(..., if_version=n)`` over the version the previous write of that
  key returned (what ``update()`` sends after its read), never refused;
- ``increment``: ``backend.increment`` (one statement).

The target: a conditional write costs no more than ~1.2x a plain one (ratio set/if_version).

Then ``--processes`` processes x ``--increments`` increments of one key at once: the total must
be exactly their product (and every returned number distinct).

    PYTHONPATH=dev uv run python bench/bench_atomic.py [--db postgres|mysql|sqlite] [--redis] \
        [--ops 2000] [--rounds 5] [--processes 8] [--increments 500]
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import create_dag_run, measure, parse_args, use_migrated_airflow


def main() -> None:
    parser = parse_args(__doc__, ops=2000)
    parser.add_argument("--db", choices=("postgres", "mysql", "sqlite"), default="postgres")
    parser.add_argument("--redis", action="store_true", help="also the Redis backend, side by side")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--increments", type=int, default=500)
    args = parser.parse_args()
    from state_testing import dbservers

    with ExitStack() as stack:
        if args.db == "postgres":
            url = stack.enter_context(dbservers.postgres_server())
        else:
            url = stack.enter_context(dbservers.database(args.db, Path(tempfile.mkdtemp())))
        use_migrated_airflow(url)
        redis_url = stack.enter_context(dbservers.redis_server()) if args.redis else None
        run(args, redis_url)


def sides(backend, scope, keys: list[str]) -> dict[str, object]:
    versions: dict[str, int] = {}

    def conditional(i: int) -> None:
        key = f"cas_{keys[i]}"
        if key not in versions:
            versions[key] = backend.write(scope, key, "0")
        versions[key] = backend.write(scope, key, f"value-{i}", if_version=versions[key])

    return {
        "set": lambda i: backend.set(scope, keys[i], f"value-{i}"),
        "write": lambda i: backend.write(scope, keys[i], f"value-{i}"),
        "if_version": conditional,
        "increment": lambda i: backend.increment(scope, f"n_{keys[i]}"),
    }


def _count(backend, scope, key: str, increments: int, barrier, out) -> None:
    barrier.wait()
    out.put([backend.increment(scope, key) for _ in range(increments)])


def contention(backend, scope, processes: int, increments: int) -> tuple[float, bool]:
    """*processes* forked processes x *increments* increments of one fresh key; (seconds, exact)."""
    key = f"contended_{time.monotonic_ns()}"
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(processes + 1), context.Queue()
    workers = [
        context.Process(target=_count, args=(backend, scope, key, increments, barrier, out))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    returned = [n for _ in workers for n in out.get(timeout=600)]
    elapsed = time.perf_counter() - start
    for worker in workers:
        worker.join()
    total = processes * increments
    exact = backend.get(scope, key) == str(total) and sorted(returned) == list(range(1, total + 1))
    return elapsed, exact


def run(args, redis_url: str | None) -> None:
    from airflow import settings
    from airflow_shared.state import TaskScope
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    # The metastore finds the dag run itself; Redis keys on the run's incarnation.
    scope = TaskScope("bench", "run", "task", dag_run_uid="bench-run")
    backends = {args.db: MetastoreStateBackend()}
    if redis_url:
        from airflow_state_redis import RedisStateBackend

        backends["redis"] = RedisStateBackend(redis_url)
    keys = [f"key_{i % 100}" for i in range(args.ops)]
    by_op: dict[str, dict[str, object]] = {}
    for name, backend in backends.items():
        for op, operation in sides(backend, scope, keys).items():
            by_op.setdefault(op, {})[name] = operation
    medians = measure(by_op, args.ops, args.rounds)

    driver = settings.engine.dialect.driver
    print(
        f"\nAtomic operations on {args.db} ({driver}), {args.rounds} rounds x {args.ops} ops, medians (ops/s)"
    )
    print(f"{'op':<12}" + "".join(f"{name:>12}{'set/op':>8}" for name in backends))
    for op, by_side in medians.items():
        row = f"{op:<12}"
        for name in backends:
            row += f"{by_side[name]:>12.0f}{medians['set'][name] / by_side[name]:>8.2f}"
        print(row)
    print("target: set/if_version <= ~1.2")

    print(f"\n{args.processes} processes x {args.increments} increments of one key")
    for name, backend in backends.items():
        elapsed, exact = contention(backend, scope, args.processes, args.increments)
        total = args.processes * args.increments
        print(
            f"{name:<10} {total} increments in {elapsed:.2f}s ({total / elapsed:.0f}/s): "
            f"{'exactly ' + str(total) if exact else 'LOST UPDATES'}"
        )


if __name__ == "__main__":
    main()
