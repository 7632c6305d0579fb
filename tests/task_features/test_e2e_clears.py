"""
A clear after success starts afresh, a clear after failure reconnects, a retry reconnects: on a
real deployment (PostgreSQL, scheduler, LocalExecutor), through every way of clearing, counted in
jobs submitted by a resumable operator (tests/dags/state_clear_dags.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from state_testing.deployment import Deployment

RUN = "first"
DAGS = (
    "clear_e2e_retry",
    "clear_e2e_rest",
    "clear_e2e_dag_run",
    "clear_e2e_cli",
    "clear_e2e_views",
    "clear_e2e_downstream",
    "clear_e2e_keep_always",
    "clear_e2e_failure",
    "clear_e2e_failure_never",
)
#: How each DAG's first run ends.
FAILS_FIRST = {"clear_e2e_failure", "clear_e2e_failure_never"}


@pytest.fixture(scope="module", autouse=True)
def first_runs(deployment: Deployment) -> None:
    """Every DAG's first run triggered at once and finished."""
    for dag_id in DAGS:
        deployment.wait_for_dag(dag_id, timeout=120)
    for dag_id in DAGS:
        deployment.trigger(dag_id, RUN)
    for dag_id in DAGS:
        expected = "failed" if dag_id in FAILS_FIRST else "success"
        assert deployment.wait_for_run(dag_id, RUN, timeout=240) == expected, deployment.logs()


@pytest.fixture(scope="module")
def api(deployment: Deployment) -> Iterator[httpx.Client]:
    """Airflow's REST API, as the UI calls it, logged in as an admin."""
    headers = {"Authorization": f"Bearer {deployment.token('admin')}"}
    with httpx.Client(base_url=deployment.api_url, headers=headers, timeout=60, trust_env=False) as client:
        yield client


def job_count(jobs: Path, dag_id: str) -> int:
    return len(list(jobs.glob(f"{dag_id}.{RUN}.job.*.count")))


def stored_job(deployment: Deployment, dag_id: str) -> str | None:
    rows = deployment.query(
        "SELECT value FROM task_state WHERE dag_id = :d AND run_id = :r AND task_id = 'job'"
        " AND key = 'remote_job_id'",
        d=dag_id,
        r=RUN,
    )
    return json.loads(rows[0]["value"]) if rows else None


def clear_task_instances(api: httpx.Client, dag_id: str, **body) -> None:
    """The UI's clear: POST clearTaskInstances (its only_failed defaults to true: not here)."""
    body = {"dry_run": False, "only_failed": False, "dag_run_id": RUN, "task_ids": ["job"], **body}
    response = api.post(f"/api/v2/dags/{dag_id}/clearTaskInstances", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["total_entries"] >= 1, response.text


def rerun(deployment: Deployment, dag_id: str) -> dict:
    """Wait for the job task's try 2 to finish (a CLI clear may return after it did); return the instance."""

    def job() -> dict:
        [found] = [ti for ti in deployment.task_instances(dag_id, RUN) if ti["task_id"] == "job"]
        return found

    deployment._wait(
        lambda: job()["try_number"] >= 2 and job()["state"] in ("success", "failed"), 180, f"{dag_id}'s rerun"
    )
    assert deployment.wait_for_run(dag_id, RUN, timeout=60) == "success", deployment.logs()
    return job()


#: How each DAG is cleared after its first run (clear_e2e_views is cleared by its test, paused).
CLEARS = {
    "clear_e2e_rest": {},
    "clear_e2e_dag_run": {},
    "clear_e2e_cli": {},
    # the upstream task cleared, the job task with it as its downstream
    "clear_e2e_downstream": {"task_ids": ["start"], "include_downstream": True},
    "clear_e2e_keep_always": {},
    "clear_e2e_failure": {"only_failed": True},  # the UI's default
    "clear_e2e_failure_never": {"only_failed": True},
}


@pytest.fixture(scope="module")
def first_jobs(deployment: Deployment, api: httpx.Client, jobs: Path) -> dict[str, str | None]:
    """The job id each DAG stored in its first run, which submitted one job; then every DAG of
    :data:`CLEARS` cleared at once, so that their reruns run side by side."""
    stored = {dag_id: stored_job(deployment, dag_id) for dag_id in CLEARS}
    assert {dag_id: job_count(jobs, dag_id) for dag_id in CLEARS} == dict.fromkeys(CLEARS, 1)
    for dag_id, body in CLEARS.items():
        if dag_id == "clear_e2e_dag_run":
            response = api.post(f"/api/v2/dags/{dag_id}/dagRuns/{RUN}/clear", json={"dry_run": False})
            assert response.status_code == 200, response.text
        elif dag_id == "clear_e2e_cli":
            # Airflow 3.2 matches --task-regex as a substring of the task id.
            deployment.airflow("tasks", "clear", dag_id, "--task-regex", "job", "--yes")
        else:
            clear_task_instances(api, dag_id, **body)
    return stored


def test_a_retry_reconnects_to_its_job(deployment, jobs):
    [job] = deployment.task_instances("clear_e2e_retry", RUN)
    assert (job["state"], job["try_number"]) == ("success", 2)
    assert job_count(jobs, "clear_e2e_retry") == 1


@pytest.mark.parametrize("way", ["rest", "dag_run", "cli", "downstream"])
def test_a_clear_after_success_submits_a_new_job(deployment, first_jobs, jobs, way):
    dag_id = f"clear_e2e_{way}"
    first_job = first_jobs[dag_id]
    assert first_job is not None
    job = rerun(deployment, dag_id)
    assert job["try_number"] == 2
    assert job_count(jobs, dag_id) == 2, deployment.logs()
    assert stored_job(deployment, dag_id) not in (None, first_job)


def test_a_task_that_keeps_its_state_always_reconnects_after_success(deployment, first_jobs, jobs):
    dag_id = "clear_e2e_keep_always"
    assert rerun(deployment, dag_id)["try_number"] == 2
    assert job_count(jobs, dag_id) == 1 and stored_job(deployment, dag_id) == first_jobs[dag_id]


@pytest.mark.parametrize(("dag_id", "jobs_after"), [("clear_e2e_failure", 1), ("clear_e2e_failure_never", 2)])
def test_a_clear_after_failure_reconnects_unless_never_kept(deployment, first_jobs, jobs, dag_id, jobs_after):
    first_job = first_jobs[dag_id]
    assert first_job is not None
    assert rerun(deployment, dag_id)["try_number"] == 2
    assert job_count(jobs, dag_id) == jobs_after, deployment.logs()
    assert (stored_job(deployment, dag_id) == first_job) == (jobs_after == 1)


def test_operators_do_not_see_a_job_id_the_next_try_will_discard(deployment, api, jobs):
    dag_id = "clear_e2e_views"
    first_job = stored_job(deployment, dag_id)
    assert first_job is not None
    # Paused, the scheduler leaves the cleared run alone: the next try has not started.
    assert api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": True}).status_code == 200
    clear_task_instances(api, dag_id)
    assert stored_job(deployment, dag_id) == first_job  # still stored, until the next try starts
    state_url = f"/state/api/v1/dags/{dag_id}/dagRuns/{RUN}/taskInstances/job/state"
    listed = api.get(state_url)
    assert listed.status_code == 200 and listed.json()["total_entries"] == 0, listed.text
    read = api.get(f"{state_url[: -len('state')]}stateEntry", params={"key": "remote_job_id"})
    assert read.status_code == 404, read.text
    out = deployment.airflow("state", "list", "--dag-id", dag_id, "--run-id", RUN, "--task-id", "job")
    assert first_job not in out
    assert api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}).status_code == 200
    assert rerun(deployment, dag_id)["try_number"] == 2
    assert job_count(jobs, dag_id) == 2
    listed = api.get(state_url).json()
    assert [entry["key"] for entry in listed["entries"]] == ["remote_job_id"]
    assert listed["entries"][0]["value"] not in (None, first_job)
