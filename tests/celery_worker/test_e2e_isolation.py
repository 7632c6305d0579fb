"""
Task code can only act as its own task instance through anything of ours, on a deployment shaped
like production: the CeleryExecutor with a real Redis broker and a real Celery worker, whose
configuration holds neither Airflow's JWT key nor any key of ours (only the API server and the
scheduler hold Airflow's), and api-server, scheduler and dag-processor on PostgreSQL.

A hostile task in one DAG attacks the state of a running task of another DAG with everything it
can reach on its worker but the broker (see tests/dags/state_isolation_dags.py); every attempt is
refused and nothing changes. The broker hands any task another running task's Airflow token, which
is Airflow 3.2's exposure: tests/celery_worker/test_celery_deployment.py asserts it as it is today. A
well-behaved task on the same deployment still reconnects after a SIGKILL. (What the worker holds
is checked in tests/celery_worker/test_celery_deployment.py; the hostile task reports it again from inside.)
"""

from __future__ import annotations

import json

import httpx
from state_testing.deployment import Deployment


def state_rows(deployment: Deployment) -> dict:
    """Every task state and asset state row: what must not change."""
    return {
        "task": deployment.query(
            "SELECT dag_id, run_id, task_id, map_index, key, value FROM task_state ORDER BY 1, 2, 3, 4, 5"
        ),
        "asset": deployment.query("SELECT asset_id, key, value FROM asset_state ORDER BY 1, 2"),
    }


def test_a_hostile_task_cannot_read_or_change_another_dags_state(deployment, shared_dir):
    deployment.wait_for_dag("isolation_victim", timeout=120)
    deployment.wait_for_dag("isolation_hostile", timeout=120)
    deployment.trigger("isolation_victim", "victim_1")
    deployment._wait(lambda: (shared_dir / "victim-ready").exists(), 180, "the victim to write its state")
    [victim] = deployment.query(
        "SELECT id, dag_id, run_id, task_id, state FROM task_instance WHERE run_id = 'victim_1'"
    )
    assert victim["state"] == "running"
    before = state_rows(deployment)
    assert len(before["task"]) == 1 and len(before["asset"]) == 2

    conf = {
        "victim": {k: str(victim[k]) for k in ("dag_id", "run_id", "task_id")} | {"ti_id": str(victim["id"])}
    }
    deployment.trigger("isolation_hostile", "hostile_1", conf=conf)
    assert deployment.wait_for_run("isolation_hostile", "hostile_1", timeout=300) == "success", (
        deployment.logs()
    )
    report = json.loads((shared_dir / "hostile.json").read_text())

    found = report["found"]
    assert found["jwt_secret"] == found["session_key"] == found["api_secret"] == ""
    assert found["jwt_private_key_path"] == ""
    assert not [name for name in found["env"] if "JWT" in name or "STATE__" in name]
    # The supervisor's own token was there to be read, and let it write only its own fields.
    assert found["airflow_token"] is True
    assert found["airflow_token_wrote_own_fields"] in (200, 201, 204)

    attempts = report["attempts"]
    assert len(attempts) >= 60, attempts
    refused = [a for a in attempts if a["status"] in (401, 403)]
    assert refused == attempts, [a for a in attempts if a not in refused]
    by_name = {a["name"]: a for a in attempts}
    assert by_name["victim's proof written in own fields"]["detail"]["reason"] == "proof_not_found"
    assert by_name["Airflow token: write the victim's rendered fields"]["status"] == 403
    assert by_name["victim's proof after the Airflow token's writes"]["detail"]["reason"] == "proof_not_found"
    assert by_name["own credential: write victim asset"]["detail"]["reason"] == "asset_not_declared"
    assert by_name["own credential: read"]["detail"]["reason"] == "forbidden"

    # A credential kept after its task finished: no write, no renewal, nothing of another task.
    kept = json.loads((shared_dir / "try-2.json").read_text())
    headers = {"Authorization": f"Bearer {kept['credential']}"}
    api = f"{deployment.api_url}/state"
    write = httpx.put(
        f"{api}/task-instances/{kept['ti_id']}/value",
        params={"key": "mine"},
        json={"value": 0},
        headers=headers,
    )
    assert write.status_code == 403 and write.json()["detail"]["reason"] == "not_running"
    assert httpx.post(f"{api}/credentials/renew", headers=headers).status_code == 403
    victim_read = httpx.get(
        f"{api}/task-instances/{victim['id']}/value", params={"key": "secret"}, headers=headers
    )
    assert victim_read.status_code == 403

    # Nothing changed, and the victim, still running all along, finds its state as it left it.
    assert state_rows(deployment)["asset"] == before["asset"]
    victims = [row for row in state_rows(deployment)["task"] if row["dag_id"] == "isolation_victim"]
    assert victims == before["task"]
    (shared_dir / "release-victim").write_text("")
    assert deployment.wait_for_run("isolation_victim", "victim_1", timeout=180) == "success", (
        deployment.logs()
    )
    # The handshake left no proof behind in the rendered fields of the well-behaved task.
    [fields] = deployment.query(
        "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = 'isolation_victim'"
    )
    rendered = fields["rendered_fields"]
    rendered = json.loads(rendered) if isinstance(rendered, str) else rendered
    assert not rendered.get("airflow_task_state_proof")


def test_a_well_behaved_task_reconnects_after_a_sigkill_of_its_try(deployment, shared_dir):
    deployment.wait_for_dag("example_resumable_job", timeout=120)
    deployment.trigger("example_resumable_job", "celery_crash_1")
    assert deployment.wait_for_run("example_resumable_job", "celery_crash_1", timeout=300) == "success", (
        deployment.logs()
    )
    submitted = sorted(path.stem for path in (shared_dir / "jobs").glob("*.submitted"))
    assert len(submitted) == 1, f"expected one job, got {submitted}"
    [ti] = deployment.task_instances("example_resumable_job", "celery_crash_1")
    assert ti["try_number"] == 2 and ti["state"] == "success"
    [row] = deployment.query(
        "SELECT value, updated_by_try FROM task_state "
        "WHERE run_id = 'celery_crash_1' AND key = 'remote_job_id'"
    )
    assert json.loads(row["value"]) == submitted[0] and row["updated_by_try"] == 1
