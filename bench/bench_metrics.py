"""
What metrics cost on the hot path: the configured backend bare (metrics off) and wrapped in
MeasuredStateBackend sending to a StatsD socket (metrics on), side by side in one run, for the
metastore and for the in-memory reference backend (where nothing hides the wrapper's own cost).

    PYTHONPATH=dev uv run python bench/bench_metrics.py [--db sqlite|postgres|mysql] [--ops 2000] [--rounds 5]
"""

from __future__ import annotations

import os
import socket
import tempfile
from contextlib import ExitStack
from pathlib import Path

from _common import create_dag_run, measure, parse_args, use_migrated_airflow


def main() -> None:
    parser = parse_args(__doc__, ops=2000)
    parser.add_argument("--db", choices=("postgres", "mysql", "sqlite"), default="sqlite")
    args = parser.parse_args()
    from state_testing import dbservers

    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))  # a StatsD server that never reads: sending costs what it costs
    os.environ.update(
        AIRFLOW__METRICS__STATSD_ON="True",
        AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
        AIRFLOW__METRICS__STATSD_PORT=str(receiver.getsockname()[1]),
    )
    with ExitStack() as stack:
        if args.db == "postgres":
            url = stack.enter_context(dbservers.postgres_server())
        else:
            url = stack.enter_context(dbservers.database(args.db, Path(tempfile.mkdtemp())))
        use_migrated_airflow(url)
        run(args)


def run(args) -> None:
    from airflow_shared.state import TaskScope
    from airflow_shared.state.testing import MemoryStateBackend
    from airflow_task_state.metastore import MetastoreStateBackend
    from airflow_task_state.metrics import ensure_stats_configured, measured

    ensure_stats_configured()
    create_dag_run("bench", "run")
    scope = TaskScope("bench", "run", "task", dag_run_uid="uid")
    keys = [f"key_{i % 100}" for i in range(args.ops)]
    for name, bare in (("metastore", MetastoreStateBackend()), ("memory", MemoryStateBackend())):
        wrapped = measured(bare)
        sides = {
            op: {
                "off": (lambda i, b=bare, op=op: _call(b, op, scope, keys[i])),
                "on": (lambda i, b=wrapped, op=op: _call(b, op, scope, keys[i])),
            }
            for op in ("set", "get")
        }
        results = measure(sides, args.ops, args.rounds)
        for op, by_side in results.items():
            off, on = by_side["off"], by_side["on"]
            extra_us = (1 / on - 1 / off) * 1e6
            print(
                f"{name:9} {op:4} off {off:10.0f} ops/s  on {on:10.0f} ops/s  "
                f"on/off {on / off:5.2f}  +{extra_us:6.1f} us/call"
            )


def _call(backend, op: str, scope, key: str) -> object:
    if op == "set":
        return backend.set(scope, key, '{"v": 1}')
    return backend.get(scope, key)


if __name__ == "__main__":
    main()
