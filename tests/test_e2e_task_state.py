"""
The feature on a real deployment: `airflow api-server`, `scheduler` and `dag-processor` with the
LocalExecutor on PostgreSQL, running the example DAGs that ship with the package.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import airflow.state.example_dags as example_dags
import httpx
import pytest
from deployment import Deployment, airflow_deployment

EXAMPLE_DAGS = Path(example_dags.__file__).parent


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("simulated-jobs")


@pytest.fixture(scope="module")
def deployment(db_kind: str, jobs: Path) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the end-to-end deployment runs on PostgreSQL: use --db postgres")
    with airflow_deployment(EXAMPLE_DAGS, extra_env={"STATE_EXAMPLE_JOBS_DIR": str(jobs)}) as running:
        yield running


def run_to_end(deployment: Deployment, dag_id: str, run_id: str, conf: dict | None = None) -> None:
    deployment.wait_for_dag(dag_id, timeout=90)
    deployment.trigger(dag_id, run_id, conf=conf)
    state = deployment.wait_for_run(dag_id, run_id, timeout=120)
    assert state == "success", deployment.logs()


def task_state(deployment: Deployment, dag_id: str, run_id: str) -> dict[tuple[str, int, str], tuple]:
    rows = deployment.query(
        "SELECT task_id, map_index, key, value, updated_by_try FROM task_state "
        "WHERE dag_id = :d AND run_id = :r",
        d=dag_id,
        r=run_id,
    )
    return {
        (r["task_id"], r["map_index"], r["key"]): (json.loads(r["value"]), r["updated_by_try"]) for r in rows
    }


def test_worker_killed_after_submitting_reconnects_on_retry(deployment, jobs):
    run_to_end(deployment, "example_resumable_job", "crash_1")

    submitted = sorted(path.stem for path in jobs.glob("*.submitted"))
    assert len(submitted) == 1, f"expected one job, got {submitted}"
    [ti] = deployment.task_instances("example_resumable_job", "crash_1")
    assert (ti["state"], ti["try_number"]) == ("success", 2)
    assert task_state(deployment, "example_resumable_job", "crash_1") == {
        ("run_job", -1, "remote_job_id"): (submitted[0], 1)
    }
    log = deployment.logs()
    assert f"Reconnecting to job {submitted[0]}" in log


def test_mapped_instances_keep_separate_state(deployment):
    run_to_end(deployment, "example_mapped_state", "mapped_1")

    state = task_state(deployment, "example_mapped_state", "mapped_1")
    for index in (0, 1, 2):
        assert state[("process", index, "partition")] == (index, 1)
        assert state[("process", index, "offset")] == (index * 1000, 1)
    assert len(state) == 6


def test_async_task_keeps_its_checkpoint(deployment):
    run_to_end(deployment, "example_async_state", "async_1")

    assert task_state(deployment, "example_async_state", "async_1") == {
        ("crawl", -1, "checkpoint"): ({"page": 3}, 1)
    }


def test_asset_watermark_written_by_run_1_is_read_by_run_2(deployment):
    run_to_end(deployment, "example_asset_watermark", "watermark_1")
    run_to_end(deployment, "example_asset_watermark", "watermark_2")

    [row] = deployment.query(
        "SELECT s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = 'orders' AND s.key = 'watermark'"
    )
    assert json.loads(row["value"]) == 200


def test_a_token_for_one_task_instance_is_refused_on_anothers_state(deployment):
    from airflow.state.tokens import TaskInstanceClaims, mint

    run_to_end(deployment, "example_async_state", "async_tokens")
    [mine] = deployment.query(
        "SELECT id, dag_id, run_id, task_id, map_index, try_number FROM task_instance "
        "WHERE run_id = 'async_tokens'"
    )
    [other] = deployment.query("SELECT id FROM task_instance WHERE run_id = 'mapped_1' AND map_index = 1")
    claims = TaskInstanceClaims(
        str(mine["id"]),
        mine["dag_id"],
        mine["run_id"],
        mine["task_id"],
        mine["map_index"],
        mine["try_number"],
    )
    secret = deployment.env["AIRFLOW__STATE__API_SECRET"]
    base = f"{deployment.api_url}/state/task-instances"

    def call(method: str, ti_id: str, key: str, secret: str = secret, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {mint(claims, secret)}"}
        return httpx.request(method, f"{base}/{ti_id}/keys/{key}", headers=headers, timeout=30, **kwargs)

    assert call("GET", str(other["id"]), "offset").status_code == 403
    assert call("PUT", str(other["id"]), "offset", json={"value": 1}).status_code == 403
    assert call("GET", str(mine["id"]), "checkpoint").json()["value"] == {"page": 3}
    # The task has finished: its token may still read, but no longer write.
    finished = call("PUT", str(mine["id"]), "checkpoint", json={"value": {"page": 0}})
    assert finished.status_code == 403 and "only a running try" in finished.json()["detail"]
    assert call("GET", str(mine["id"]), "checkpoint", secret="not-the-secret-" * 5).status_code == 401
    schema = httpx.get(f"{deployment.api_url}/state/openapi.json", timeout=30).json()
    assert "/task-instances/{task_instance_id}/keys/{key}" in schema["paths"]
