"""
A stand-in for a remote job system (Spark, EMR, Databricks...), made of local processes.

A job is a detached process that outlives the worker that submitted it, like a real cluster job:
it writes ``<id>.submitted`` at once (holding who submitted it, when the caller says) and
``<id>.result`` when done. Counting ``*.submitted`` files tells how many jobs were ever submitted.

:class:`SimulatedJobTrigger` watches one such job from the triggerer, for deferrable operators. It
lives in this installed module, not in a DAG file, because the triggerer imports a trigger by its
class path and does not load the DAG folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_task_state.resumable import JobStatus

_JOB = """
import sys, time, pathlib
folder, job_id, seconds, fail = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
time.sleep(seconds)
if fail == "fail":
    sys.exit(1)
(folder / f"{job_id}.result").write_text(f"42 rows processed by {job_id}")
"""


def jobs_folder() -> Path:
    folder = Path(os.environ.get("STATE_EXAMPLE_JOBS_DIR", "/tmp/airflow-state-example-jobs"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def submit(seconds: float, submitted_by: dict[str, Any] | None = None, fail: bool = False) -> str:
    """A job that succeeds after *seconds* (with *fail*, or *seconds* < 0, it dies with no result)."""
    folder, job_id = jobs_folder(), f"app_{uuid.uuid4().hex[:8]}"
    (folder / f"{job_id}.submitted").write_text(json.dumps(submitted_by or {}))
    process = subprocess.Popen(
        [sys.executable, "-c", _JOB, str(folder), job_id, str(seconds), "fail" if fail else "succeed"],
        start_new_session=True,  # survives the worker, as a cluster job would
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (folder / f"{job_id}.pid").write_text(str(process.pid))
    return job_id


def status(job_id: str) -> JobStatus:
    folder = jobs_folder()
    if (folder / f"{job_id}.result").exists():
        return JobStatus.SUCCEEDED
    pid_file = folder / f"{job_id}.pid"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        return JobStatus.RUNNING
    return JobStatus.FAILED


def submitted(**submitted_by: Any) -> list[str]:
    """The ids of the jobs ever submitted whose *submitted_by* holds these items, oldest first."""
    found = []
    for path in jobs_folder().glob("*.submitted"):
        labels = json.loads(path.read_text() or "{}")
        if all(labels.get(name) == value for name, value in submitted_by.items()):
            found.append((path.stat().st_mtime_ns, path.stem))
    return [job_id for _, job_id in sorted(found)]


def result(job_id: str) -> str:
    return (jobs_folder() / f"{job_id}.result").read_text()


def kill(job_id: str) -> None:
    """Stop a job that is still running, as cancelling it on the cluster would (it then counts as failed)."""
    pid_file = jobs_folder() / f"{job_id}.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child of a dead worker may linger as a zombie until reaped.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


class SimulatedJobTrigger(BaseTrigger):
    """
    Fires ``{"status": "succeeded" | "failed", "job_id": ...}`` once the job has finished. A poll is a
    few file checks, too short to hold up the triggerer's event loop; it never touches task state.
    """

    def __init__(self, job_id: str, poll_interval: float = 0.5) -> None:
        super().__init__()
        self.job_id = job_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_id": self.job_id,
            "poll_interval": self.poll_interval,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while (outcome := status(self.job_id)) is JobStatus.RUNNING:
            await asyncio.sleep(self.poll_interval)
        self.log.info("Simulated job %s finished: %s", self.job_id, outcome.value)
        yield TriggerEvent({"status": outcome.value, "job_id": self.job_id})
