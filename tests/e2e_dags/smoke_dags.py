"""
DAGs that prove the end-to-end harness: a task runs, and a task whose process dies hard is retried.

Each task appends a line to a marker file, whose path comes from the dag run's conf (``marker``) or
else from the ``HARNESS_MARKER`` environment variable, so the test can see what ran outside Airflow.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path

from airflow.sdk import dag, get_current_context, task


def _marker() -> Path:
    conf = get_current_context()["dag_run"].conf or {}
    return Path(conf.get("marker") or os.environ["HARNESS_MARKER"])


def _record(line: str) -> None:
    # fsync: the crash task is killed right after writing, and the test must still see the line.
    with open(_marker(), "a") as marker:
        marker.write(line + "\n")
        marker.flush()
        os.fsync(marker.fileno())


@dag(dag_id="harness_smoke", schedule=None, catchup=False)
def harness_smoke():
    @task
    def write_marker() -> None:
        _record(f"ran try {get_current_context()['ti'].try_number}")

    write_marker()


@dag(dag_id="harness_crash_retry", schedule=None, catchup=False)
def harness_crash_retry():
    @task(retries=1, retry_delay=timedelta(seconds=1))
    def crash_then_succeed() -> None:
        try_number = get_current_context()["ti"].try_number
        _record(f"ran try {try_number}")
        if try_number == 1:
            # A worker lost without warning: no exception, no clean exit, nothing reported by the task.
            os.kill(os.getpid(), signal.SIGKILL)

    crash_then_succeed()


harness_smoke()
harness_crash_retry()
