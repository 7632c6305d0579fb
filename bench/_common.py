"""What the benchmarks share: arguments, alternating timed rounds, summaries, a migrated Airflow home."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

Operation = Callable[[int], object]


def parse_args(doc: str | None, ops: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=ops, help="operations per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def ops_per_second(operation: Operation, ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        operation(i)
    return ops / (time.perf_counter() - start)


def measure(sides: dict[str, dict[str, Operation]], ops: int, rounds: int) -> dict[str, dict[str, float]]:
    """
    Median ops/s of every side of every operation. Rounds alternate between the sides, so that
    drift on the machine (other processes, caches, autovacuum) hits them alike; each side is
    warmed up first (pools, statement caches, connections).
    """
    for operations in sides.values():
        for operation in operations.values():
            for i in range(min(ops, 200)):
                operation(i)
    samples: dict[str, dict[str, list[float]]] = {
        op: {side: [] for side in by_side} for op, by_side in sides.items()
    }
    for _ in range(rounds):
        for op, by_side in sides.items():
            for side, operation in by_side.items():
                samples[op][side].append(ops_per_second(operation, ops))
    return {
        op: {side: statistics.median(values) for side, values in by_side.items()}
        for op, by_side in samples.items()
    }


def summary(values: list[float]) -> tuple[float, float, float]:
    """Median, mean and p99 (nearest rank) of *values*."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered) + 0.5) - 1)]
    return statistics.median(ordered), statistics.mean(ordered), p99


def use_migrated_airflow(url: str) -> None:
    """Point this process's Airflow at *url* (before Airflow is imported) and run `airflow db migrate`."""
    from state_testing.airflow_cli import run_airflow

    os.environ.update(
        {
            "AIRFLOW_HOME": tempfile.mkdtemp(prefix="state-bench-"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        }
    )
    run_airflow("db", "migrate")


def create_dag_run(dag_id: str, run_id: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    with create_session() as session:
        session.add(
            DagRun(dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
        )
