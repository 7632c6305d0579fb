"""
Large values on a real deployment (this folder's conftest.py, with a file:// object store): the
example DAG checkpoints a large file, its first try is SIGKILLed mid-job, and the retry resumes
from the last checkpoint, fetched and checked, instead of starting over.
"""

from __future__ import annotations

import json

import blake3
from airflow_task_state import large_values
from airflow_task_state.example_dags.example_large_checkpoint import MIB, _block


def run_to_end(deployment, dag_id: str, run_id: str) -> None:
    deployment.wait_for_dag(dag_id, timeout=90)
    deployment.trigger(dag_id, run_id)
    assert deployment.wait_for_run(dag_id, run_id, timeout=180) == "success", deployment.logs()


def test_a_large_checkpoint_survives_a_killed_try_and_the_retry_resumes_from_it(deployment, objects):
    run_to_end(deployment, "example_large_checkpoint", "crash_1")
    [ti] = deployment.task_instances("example_large_checkpoint", "crash_1")
    assert (ti["state"], ti["try_number"]) == ("success", 2)
    logs = deployment.task_logs("example_large_checkpoint", "crash_1")
    assert "Simulating a worker crash after step 3" in logs
    assert f"Resuming after step 3 from a {3 * 4 * MIB}-byte checkpoint" in logs
    assert "Checkpointed step 1" in logs and logs.count("Checkpointed step 4") == 1
    [row] = deployment.query(
        "SELECT value, updated_by_try FROM task_state WHERE dag_id = :d AND run_id = :r AND key = 'export'",
        d="example_large_checkpoint",
        r="crash_1",
    )
    reference = large_values.parse(json.loads(row["value"]))
    expected = b"".join(_block(step, 4 * MIB) for step in range(1, 7))
    assert (reference.kind, reference.size, row["updated_by_try"]) == ("bytes", len(expected), 2)
    assert (reference.algorithm, reference.digest) == ("blake3", blake3.blake3(expected).hexdigest())
    assert (objects / reference.name).read_bytes() == expected
