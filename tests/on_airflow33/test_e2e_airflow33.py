"""
The product on a real Airflow 3.3.2 deployment: `airflow api-server`, `scheduler`, `dag-processor` and
`triggerer` of the cached Airflow 3.3.2 environment (``state_testing.airflow33``, this working tree's
distributions installed in it), the LocalExecutor on PostgreSQL, with
``[state_store] backend = airflow_task_state.state_store_backend.StateStoreBackend``: one store for
Airflow 3.3's own accessors, REST API and CLI and for ours (tests/dags/state_airflow33_dags.py).

PostgreSQL, as the other end-to-end modules: the deployment runs four components and several task
processes that write at once, which SQLite serialises on one file lock, and the 3.3 metastore's
writes lock their meta rows, which only a server database does row by row. It runs in the
``--db postgres`` pass of the suites on Airflow 3.3, and is skipped on Airflow 3.2. Alone (the
first line builds or updates the cached environment, then runs its Python):

    PYTHONPATH=dev uv run --no-sync python -m state_testing.airflow33 \
        -m pytest --db postgres tests/on_airflow33

One deployment for the module: every first run is triggered at once (through the REST API: Airflow
3.3's CLI takes some twenty seconds a command on a loaded two-core machine), and each test checks its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import airflow_task_state.example_dags as example_dags
import httpx
import pytest
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE
from state_testing.deployment import Deployment, airflow33_program, airflow_deployment

if not AIRFLOW_HAS_STATE_STORE:
    pytest.skip(
        "runs on Airflow 3.3 (this is Airflow 3.2): PYTHONPATH=dev uv run --no-sync python -m "
        "state_testing.airflow33 -m pytest --db postgres tests/on_airflow33",
        allow_module_level=True,
    )

# After the skip: importing a module of the 3.2 tests is harmless, but pointless there.
from task_features.test_e2e_deferrable import extra_tries, submitted

TESTS = Path(__file__).parents[1]
DAG_FILES = [
    TESTS / "dags" / "state_airflow33_dags.py",
    Path(example_dags.__file__).parent / "example_deferrable_resumable_job.py",
]
STATE_STORE_BACKEND = "airflow_task_state.state_store_backend.StateStoreBackend"
USERS = {"admin": "admin", "viewer": "viewer"}
RUN = "first"
DEFERRABLE = "example_deferrable_resumable_job"
#: Each DAG's first run: its conf, and how it ends.
FIRST_RUNS = {
    "af33_mixed": ({}, "success"),
    "af33_clear_after_success": ({}, "success"),
    "af33_clear_after_failure": ({}, "failed"),
    "af33_clear_keep_always": ({}, "success"),
    "af33_identity": ({}, "success"),
    # The job outlives try 1's death and try 2's start, so try 2 finds it running and defers on it.
    DEFERRABLE: ({"crash_first_try": True, "job_seconds": 10}, "success"),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the simulated jobs and the DAGs' reports go (STATE_EXAMPLE_JOBS_DIR)."""
    return tmp_path_factory.mktemp("af33-jobs")


@pytest.fixture(scope="module")
def deployment(db_kind: str, jobs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if db_kind != "postgres":
        pytest.skip("the end-to-end deployment runs on PostgreSQL: use --db postgres")
    folder = tmp_path_factory.mktemp("af33-dags")
    for path in DAG_FILES:
        shutil.copy(path, folder / path.name)
    extra_env = {
        "AIRFLOW__STATE_STORE__BACKEND": STATE_STORE_BACKEND,
        "STATE_EXAMPLE_JOBS_DIR": str(jobs),
        # As in tests/task_features: a loaded two-core machine can be slow to answer.
        "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "8",
    }
    with airflow_deployment(
        folder, extra_env=extra_env, users=USERS, airflow=airflow33_program(), triggerer=True
    ) as running:
        yield running


def client(deployment: Deployment, user: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {deployment.token(user)}"}
    return httpx.Client(base_url=deployment.api_url, headers=headers, timeout=60, trust_env=False)


@pytest.fixture(scope="module")
def admin(deployment: Deployment) -> Iterator[httpx.Client]:
    with client(deployment, "admin") as http:
        yield http


@pytest.fixture(scope="module")
def viewer(deployment: Deployment) -> Iterator[httpx.Client]:
    with client(deployment, "viewer") as http:
        yield http


@pytest.fixture(scope="module", autouse=True)
def first_runs(deployment: Deployment) -> None:
    """Every DAG's first run, triggered at once and finished as expected."""
    for dag_id in FIRST_RUNS:
        deployment.wait_for_dag(dag_id, timeout=120)
    for dag_id, (conf, _) in FIRST_RUNS.items():
        deployment.trigger(dag_id, RUN, conf=conf)
    for dag_id, (_, ends) in FIRST_RUNS.items():
        assert deployment.wait_for_run(dag_id, RUN, timeout=240) == ends, deployment.logs()


def returned(deployment: Deployment, dag_id: str, task_id: str) -> Any:
    """What the task instance's last try returned (its XCom; the driver decodes the JSON column)."""
    [row] = deployment.query(
        "SELECT value FROM xcom WHERE dag_id = :d AND run_id = :r AND task_id = :t AND key = 'return_value'",
        d=dag_id,
        r=RUN,
        t=task_id,
    )
    return row["value"]


def ti_path(dag_id: str, task_id: str) -> str:
    return f"/dags/{dag_id}/dagRuns/{RUN}/taskInstances/{task_id}"


def airflow_entries(http: httpx.Client, path: str) -> dict[str, Any]:
    """Airflow 3.3's REST API's listing of task (``path`` of a task instance) or asset state: key -> value."""
    response = http.get(f"/api/v2{path}/state-store")
    assert response.status_code == 200, response.text
    listed = response.json()
    entries = listed["task_state_store" if path.startswith("/dags/") else "asset_state_store"]
    return {entry["key"]: entry["value"] for entry in entries}


def our_entries(http: httpx.Client, path: str) -> dict[str, dict[str, Any]]:
    """Our REST API's listing of the same: key -> entry (value, version, writer...)."""
    response = http.get(f"/state/api/v1{path}/state")
    assert response.status_code == 200, response.text
    return {entry["key"]: entry for entry in response.json()["entries"]}


def asset_id(deployment: Deployment, name: str) -> int:
    [row] = deployment.query("SELECT id FROM asset WHERE name = :n", n=name)
    return int(row["id"])


def test_each_api_reads_what_the_other_wrote_and_the_retry_reads_both(deployment, admin):
    assert [(ti["state"], ti["try_number"]) for ti in deployment.task_instances("af33_mixed", RUN)] == [
        ("success", 2)
    ]
    assert returned(deployment, "af33_mixed", "mixed") == {
        "expired": {"airflow": None, "ours": None},
        "ours_read": {"task": {"try": 1, "api": "airflow"}, "asset": 100},
        "airflow_read": {"task": {"try": 1, "api": "ours"}, "asset": 200, "counter": 2},
    }
    # Keys written through Airflow's accessors record the try that wrote them, as ours do.
    written = our_entries(admin, ti_path("af33_mixed", "mixed"))
    assert {key: (entry["version"], entry["updated_by_try"]) for key, entry in written.items()} == {
        "written_by_airflow": (1, 1),
        "written_by_ours": (1, 1),
        "tries": (2, 2),
    }
    watermarks = our_entries(admin, f"/assets/{asset_id(deployment, 'af33_mixed')}")
    assert {key: entry["updated_by"]["try_number"] for key, entry in watermarks.items()} == {
        "airflow_watermark": 1,
        "our_watermark": 1,
    }


def test_the_operator_surfaces_of_both_show_the_same_keys(deployment, admin, viewer):
    task, asset = ti_path("af33_mixed", "mixed"), f"/assets/{asset_id(deployment, 'af33_mixed')}"
    for path in (task, asset):
        theirs, ours = airflow_entries(admin, path), our_entries(viewer, path)
        # Airflow's REST API reads its tables directly: it still lists the key that has expired.
        theirs.pop("short_lived", None)
        assert theirs == {key: entry["value"] for key, entry in ours.items()}
        assert len(theirs) >= 2, theirs
    assert "short_lived" in airflow_entries(admin, task)
    listed = deployment.airflow(
        "state", "list", "--dag-id", "af33_mixed", "--run-id", RUN, "--task-id", "mixed"
    )
    assert all(key in listed for key in our_entries(admin, task)) and "short_lived" not in listed, listed

    # An operator's write through either REST API is read through the other; a delete likewise.
    by_airflow = admin.put(f"/api/v2{task}/state-store/set_by_airflow_rest", json={"value": {"a": 1}})
    assert by_airflow.status_code == 204, by_airflow.text
    entry = f"/state/api/v1{task}/stateEntry"
    ours = admin.put(entry, params={"key": "set_by_our_rest"}, json={"value": [2]})
    assert ours.status_code == 200, ours.text
    read = admin.get(entry, params={"key": "set_by_airflow_rest"}).json()
    assert (read["value"], read["updated_by_try"]) == ({"a": 1}, None)  # an operator's, not a try's
    assert admin.get(f"/api/v2{task}/state-store/set_by_our_rest").json()["value"] == [2]
    assert admin.delete(f"/api/v2{task}/state-store/set_by_our_rest").status_code == 204
    gone = admin.get(entry, params={"key": "set_by_our_rest"})
    assert gone.status_code == 404, gone.text
    assert admin.delete(entry, params={"key": "set_by_airflow_rest"}).status_code == 204
    assert admin.get(f"/api/v2{task}/state-store/set_by_airflow_rest").status_code == 404

    # Airflow's permissions: a viewer reads both, and writes through neither.
    refused = viewer.put(f"/state/api/v1{task}/stateEntry", params={"key": "k"}, json={"value": 1})
    assert refused.status_code == 403 and refused.json()["detail"]["reason"] == "forbidden", refused.text
    refused = viewer.put(f"/state/api/v1{asset}/stateEntry", params={"key": "k"}, json={"value": 1})
    assert refused.status_code == 403 and refused.json()["detail"]["reason"] == "forbidden", refused.text
    assert viewer.put(f"/api/v2{task}/state-store/k", json={"value": 1}).status_code == 403


def clear_and_rerun(deployment: Deployment, admin: httpx.Client, dag_id: str, *, only_failed: bool) -> None:
    """Airflow 3.3's clear of the UI (``clearTaskInstances``), then the new try run to success."""
    body = {"dry_run": False, "only_failed": only_failed, "dag_run_id": RUN, "task_ids": ["job"]}
    cleared = admin.post(f"/api/v2/dags/{dag_id}/clearTaskInstances", json=body)
    assert cleared.status_code == 200 and cleared.json()["total_entries"] == 1, cleared.text

    def rerun_finished() -> bool:
        [job] = deployment.task_instances(dag_id, RUN)
        return job["try_number"] == 2 and job["state"] in ("success", "failed")

    deployment._wait(rerun_finished, 180, f"{dag_id}'s try 2")
    assert deployment.wait_for_run(dag_id, RUN, timeout=60) == "success", deployment.logs()


def test_a_clear_after_success_starts_afresh_and_after_failure_keeps_through_either_api(deployment, admin):
    """
    Our rule (docs/clearing.md) wins over Airflow 3.3.2's, which keeps task state on every clear:
    the try after a clear of a successful try finds nothing, whichever API it asks first (here
    Airflow's accessor), and the try after a clear of a failed try finds its job.
    """
    for dag_id in ("af33_clear_after_success", "af33_clear_after_failure", "af33_clear_keep_always"):
        clear_and_rerun(deployment, admin, dag_id, only_failed=dag_id.endswith("failure"))
    assert returned(deployment, "af33_clear_after_success", "job") == {
        "try": 2,
        "found": {"airflow": None, "ours": None},
    }
    assert returned(deployment, "af33_clear_after_failure", "job") == {
        "try": 2,
        "found": {"airflow": "job-of-try-1", "ours": "job-of-try-1"},
    }
    # A task that keeps its state on every clear (keep_task_state = "always") keeps it, though it
    # uses Airflow's accessor alone: the try records its choice before its code runs.
    assert returned(deployment, "af33_clear_keep_always", "job") == {"try": 2, "found": "job-of-try-1"}
    for dag_id in ("af33_clear_after_success", "af33_clear_after_failure"):
        assert airflow_entries(admin, ti_path(dag_id, "job")) == {
            "job_id": "job-of-try-2",
            "our_job_id": "job-of-try-2",
        }


def test_a_worker_killed_between_submit_and_defer_defers_on_the_same_job(deployment, admin, jobs):
    # Try 1 submitted, stored the job id and was SIGKILLed before deferring; try 2 submitted nothing.
    [(job, by_try)] = submitted(jobs, RUN)
    assert by_try == 1
    [ti] = deployment.task_instances(DEFERRABLE, RUN)
    assert (ti["state"], ti["try_number"]) == ("success", 2 + extra_tries(deployment, DEFERRABLE, RUN, 2))
    log = deployment.task_logs(DEFERRABLE, RUN)
    assert "Simulating a worker crash before deferring" in log
    assert f"Reconnecting to job {job} (running) from an earlier try; deferring" in log
    assert f"Simulated job {job} finished: succeeded" in deployment.logs()  # the trigger, in the triggerer
    assert returned(deployment, DEFERRABLE, "run_job") == f"42 rows processed by {job}"
    # The one store: Airflow's REST API shows the job id try 1 stored through ours.
    [stored] = [e for e in our_entries(admin, ti_path(DEFERRABLE, "run_job")).values()]
    assert (stored["key"], stored["value"], stored["updated_by_try"]) == ("remote_job_id", job, 1)
    assert airflow_entries(admin, ti_path(DEFERRABLE, "run_job")) == {"remote_job_id": job}


def test_a_task_cannot_read_or_write_another_task_instances_state(deployment):
    """
    ``intruder`` aims at ``victim``, running beside it: its own credential, a proof for the victim
    written in its own rendered fields, and Airflow 3.3's accessor messages with the victim's id.
    The victim ends finding its state as it left it (its task checks).
    """
    report = returned(deployment, "af33_identity", "intruder")
    assert report["read"] == [403, "forbidden"], report
    assert report["write"] == [403, "forbidden"], report
    assert report["victim's proof in own fields"] == [403, "proof_not_found"], report
    for name in ("airflow read", "airflow write"):
        assert report[name][0] == "refused" and "403" in report[name][1], report
    assert {ti["task_id"]: ti["state"] for ti in deployment.task_instances("af33_identity", RUN)} == {
        "intruder": "success",
        "victim": "success",
    }
