"""
A stand-in for a remote job system (Spark, EMR, Databricks...), made of local processes.

A job is a detached process that outlives the worker that submitted it, like a real cluster job:
it writes ``<id>.submitted`` at once and ``<id>.result`` when done. Counting ``*.submitted``
files tells how many jobs were ever submitted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from airflow.state.worker.resumable import JobStatus

_JOB = """
import sys, time, pathlib
folder, job_id, seconds = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
time.sleep(seconds)
(folder / f"{job_id}.result").write_text(f"42 rows processed by {job_id}")
"""


def jobs_folder() -> Path:
    folder = Path(os.environ.get("STATE_EXAMPLE_JOBS_DIR", "/tmp/airflow-state-example-jobs"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def submit(seconds: float) -> str:
    folder, job_id = jobs_folder(), f"app_{uuid.uuid4().hex[:8]}"
    (folder / f"{job_id}.submitted").write_text("")
    process = subprocess.Popen(
        [sys.executable, "-c", _JOB, str(folder), job_id, str(seconds)],
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


def result(job_id: str) -> str:
    return (jobs_folder() / f"{job_id}.result").read_text()


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
