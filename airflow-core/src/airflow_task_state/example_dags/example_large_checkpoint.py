"""
A long job that checkpoints a large file and, retried, resumes from it instead of starting over.

Each step appends a block of ``block_mib`` MiB to a local work file and stores the whole file with
``task_state.set_file`` (streamed to ``[state] object_storage_path``; the store keeps a reference).
The file is its own progress: steps done = its size // the block size, so one key is enough and a
try killed between two checkpoints loses only the step in between. With ``crash_first_try`` (the
default), try 1's process is SIGKILLed after ``crash_after`` steps; try 2 fetches the checkpoint
with ``task_state.get_file`` (checked against its digest) and finishes the remaining steps.

Needs ``[state] object_storage_path``; see docs/large-values-in-tasks.md.
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

MIB = 1024 * 1024


def _block(step: int, size: int) -> bytes:
    """What step *step* produces: deterministic, so a resumed run ends with the same file."""
    seed = hashlib.sha256(str(step).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


with DAG(
    dag_id="example_large_checkpoint",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "steps": Param(6, type="integer", minimum=1),
        "block_mib": Param(4, type="integer", minimum=1),
        "crash_first_try": Param(True, type="boolean"),
        "crash_after": Param(3, type="integer", minimum=1),
    },
    tags=["example", "task-state"],
):

    @task(retries=2, retry_delay=timedelta(seconds=1))
    def long_export(params=None, ti=None) -> dict:
        from airflow_task_state import task_state

        block = params["block_mib"] * MIB
        work = Path(tempfile.mkdtemp()) / "export.bin"
        resumed_from = 0
        if task_state.get_file("export", work):  # the last checkpoint of an earlier try
            resumed_from = work.stat().st_size // block
            print(f"Resuming after step {resumed_from} from a {work.stat().st_size}-byte checkpoint")
        for step in range(resumed_from + 1, params["steps"] + 1):
            with work.open("ab") as out:
                out.write(_block(step, block))
            task_state.set_file("export", work)  # the whole file, streamed; replaces the previous one
            print(f"Checkpointed step {step}")
            if params["crash_first_try"] and ti.try_number == 1 and step == params["crash_after"]:
                print(f"Simulating a worker crash after step {step}: SIGKILL to pid {os.getpid()}")
                os.kill(os.getpid(), signal.SIGKILL)
        digest = hashlib.sha256(work.read_bytes()).hexdigest()
        return {"try": ti.try_number, "resumed_from": resumed_from, "sha256": digest}

    long_export()
