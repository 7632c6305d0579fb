"""
The Redis backend beside the metastore backend (on PostgreSQL), measured side by side in one run.

Both backends store the same keys of the same task instance. Also printed: Redis against its own
floor, a bare redis-py client sending the single command each call needs at the least (HSET /
HGET) on one connection.

    PYTHONPATH=dev uv run python bench/bench_redis.py [--ops 2000] [--rounds 5]
"""

from __future__ import annotations

from contextlib import ExitStack

from _common import create_dag_run, measure, parse_args, use_migrated_airflow


def main() -> None:
    args = parse_args(__doc__, ops=2000).parse_args()
    from state_testing import dbservers

    with ExitStack() as stack:
        use_migrated_airflow(stack.enter_context(dbservers.postgres_server()))
        run(args, stack.enter_context(dbservers.redis_server()))


def run(args, redis_url: str) -> None:
    import redis
    from airflow_shared.state import TaskScope
    from airflow_state_redis import RedisStateBackend
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    # The metastore finds the dag run itself; Redis keys on the run's incarnation.
    scope = TaskScope("bench", "run", "task", dag_run_uid="bench-run")
    metastore, redis_backend = MetastoreStateBackend(), RedisStateBackend(redis_url)
    bare = redis.Redis.from_url(redis_url)
    keys = [f"key_{i % 100}" for i in range(args.ops)]

    medians = measure(
        {
            "set": {
                "metastore": lambda i: metastore.set(scope, keys[i], f"value-{i}"),
                "redis": lambda i: redis_backend.set(scope, keys[i], f"value-{i}"),
                "redis floor": lambda i: bare.hset("bench:floor", keys[i], f"value-{i}"),
            },
            "get": {
                "metastore": lambda i: metastore.get(scope, keys[i]),
                "redis": lambda i: redis_backend.get(scope, keys[i]),
                "redis floor": lambda i: bare.hget("bench:floor", keys[i]),
            },
        },
        args.ops,
        args.rounds,
    )

    print(f"\nRedis vs metastore (PostgreSQL), {args.rounds} rounds x {args.ops} ops, medians (ops/s)")
    print(
        f"{'op':<5}{'metastore':>11}{'redis':>9}{'redis floor':>13}{'redis/metastore':>17}{'redis/floor':>13}"
    )
    for op, by_side in medians.items():
        m, r, f = by_side["metastore"], by_side["redis"], by_side["redis floor"]
        print(f"{op:<5}{m:>11.0f}{r:>9.0f}{f:>13.0f}{r / m:>17.2f}{r / f:>13.2f}")


if __name__ == "__main__":
    main()
