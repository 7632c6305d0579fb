"""
The Redis backend beside the metastore backend (on PostgreSQL), measured side by side in one run.

Both backends store the same keys of the same task instance, alternating rounds so that drift on
the machine hits both alike. Also printed: Redis against its own floor, a bare redis-py client
sending the single command each call needs at the least (HSET / HGET) on one connection.

    uv run python bench/bench_redis.py [--ops 2000] [--rounds 5]
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


def ops_per_second(operation: Callable[[int], object], ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        operation(i)
    return ops / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=2000, help="operations per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import dbservers
    from conftest_helpers import run_airflow

    with ExitStack() as stack:
        home = Path(tempfile.mkdtemp(prefix="state-bench-"))
        postgres_url = stack.enter_context(dbservers.postgres_server())
        redis_url = stack.enter_context(dbservers.redis_server())
        os.environ.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_url,
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            }
        )
        run_airflow("db", "migrate")
        run(args, redis_url)


def run(args: argparse.Namespace, redis_url: str) -> None:
    import redis
    from airflow.models.dagrun import DagRun
    from airflow.state.metastore import MetastoreStateBackend
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from airflow_shared.state import TaskScope
    from airflow_state_redis import RedisStateBackend

    with create_session() as session:
        session.add(
            DagRun(dag_id="bench", run_id="run", run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
        )
    scope = TaskScope("bench", "run", "task")
    backends = {"metastore": MetastoreStateBackend(), "redis": RedisStateBackend(redis_url)}
    bare = redis.Redis.from_url(redis_url)
    keys = [f"key_{i % 100}" for i in range(args.ops)]

    sides: dict[str, dict[str, Callable[[int], object]]] = {
        "set": {name: (lambda i, b=b: b.set(scope, keys[i], f"value-{i}")) for name, b in backends.items()},
        "get": {name: (lambda i, b=b: b.get(scope, keys[i])) for name, b in backends.items()},
    }
    sides["set"]["redis floor"] = lambda i: bare.hset("bench:floor", keys[i], f"value-{i}")
    sides["get"]["redis floor"] = lambda i: bare.hget("bench:floor", keys[i])

    for operations in sides.values():
        for operation in operations.values():
            for i in range(200):
                operation(i)

    results = {op: {name: [] for name in operations} for op, operations in sides.items()}
    for _ in range(args.rounds):
        for op, operations in sides.items():
            for name, operation in operations.items():
                results[op][name].append(ops_per_second(operation, args.ops))

    print(f"\nRedis vs metastore (PostgreSQL), {args.rounds} rounds x {args.ops} ops, medians (ops/s)")
    print(
        f"{'op':<5}{'metastore':>11}{'redis':>9}{'redis floor':>13}{'redis/metastore':>17}{'redis/floor':>13}"
    )
    for op, by_name in results.items():
        m, r, f = (statistics.median(by_name[n]) for n in ("metastore", "redis", "redis floor"))
        print(f"{op:<5}{m:>11.0f}{r:>9.0f}{f:>13.0f}{r / m:>17.2f}{r / f:>13.2f}")


if __name__ == "__main__":
    main()
