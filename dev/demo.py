"""The story AIP-103 exists for, on a real Airflow deployment with the metadata database on SQLite."""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import airflow_task_state.example_dags as example_dags
import httpx
from state_testing.deployment import Deployment, airflow_deployment

EXAMPLE_DAGS = Path(example_dags.__file__).parent


def say(text: str = "") -> None:
    print(text, flush=True)


def run(deployment: Deployment, dag_id: str, run_id: str, conf: dict | None = None) -> None:
    deployment.wait_for_dag(dag_id, timeout=120)
    started = time.monotonic()
    deployment.trigger(dag_id, run_id, conf=conf)
    state = deployment.wait_for_run(dag_id, run_id, timeout=180)
    say(f"   run {run_id}: {state} in {time.monotonic() - started:.0f}s")
    if state != "success":
        say(deployment.logs())
        raise SystemExit(f"{dag_id} {run_id} ended {state}")


def state_of(deployment: Deployment, dag_id: str, run_id: str) -> list[dict]:
    return deployment.query(
        "SELECT task_id, map_index, key, value, updated_by_try FROM task_state "
        "WHERE dag_id = :d AND run_id = :r ORDER BY task_id, map_index, key",
        d=dag_id,
        r=run_id,
    )


def task_log_lines(deployment: Deployment, dag_id: str, run_id: str, pattern: str) -> list[str]:
    folder = deployment.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    lines = []
    for log in sorted(folder.rglob("attempt=*.log")):
        for line in log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line).get("event", "")
            except ValueError:
                event = line
            if re.search(pattern, event):
                lines.append(f"      {log.stem}: {event}")
    return lines


def main() -> None:
    jobs = Path(tempfile.mkdtemp(prefix="state-demo-jobs-"))
    say("== Starting Airflow: db migrate, api-server, scheduler, dag-processor (LocalExecutor, SQLite)")
    started = time.monotonic()
    with airflow_deployment(
        EXAMPLE_DAGS,
        extra_env={"STATE_EXAMPLE_JOBS_DIR": str(jobs)},
        database="sqlite",
        users={"admin": "admin"},
    ) as deployment:
        say(
            f"   up in {time.monotonic() - started:.0f}s; [state] backend = "
            f"{deployment.airflow('config', 'get-value', 'state', 'backend').strip()}"
        )

        say("\n1. A worker dies after submitting a remote job; the retry reconnects (example_resumable_job)")
        run(deployment, "example_resumable_job", "run_1")
        for line in task_log_lines(
            deployment, "example_resumable_job", "run_1", r"Submitted|SIGKILL|Reconnect"
        ):
            say(line)
        [ti] = deployment.task_instances("example_resumable_job", "run_1")
        submitted = sorted(p.stem for p in jobs.glob("*.submitted"))
        say(
            f"   task finished on try {ti['try_number']}; "
            f"remote jobs ever submitted: {len(submitted)} {submitted}"
        )
        for row in state_of(deployment, "example_resumable_job", "run_1"):
            say(f"   task_state: {row['key']} = {row['value']} (written by try {row['updated_by_try']})")

        say("\n2. A new dag run starts with empty task state: it submits its own job")
        run(deployment, "example_resumable_job", "run_2", conf={"crash_first_try": False})
        say(f"   remote jobs ever submitted: {len(list(jobs.glob('*.submitted')))}")
        for run_id in ("run_1", "run_2"):
            for row in state_of(deployment, "example_resumable_job", run_id):
                say(f"   {run_id}: {row['key']} = {row['value']}")

        say("\n3. Mapped task instances keep separate state (example_mapped_state)")
        run(deployment, "example_mapped_state", "mapped_1")
        for row in state_of(deployment, "example_mapped_state", "mapped_1"):
            say(f"   process[{row['map_index']}]: {row['key']} = {row['value']}")

        say("\n4. An async task checkpoints with aget/aset (example_async_state)")
        run(deployment, "example_async_state", "async_1")
        for row in state_of(deployment, "example_async_state", "async_1"):
            say(f"   crawl: {row['key']} = {row['value']}")

        say(
            "\n5. Asset state outlives runs: each run reads the last run's watermark"
            " (example_asset_watermark)"
        )
        for run_id in ("watermark_1", "watermark_2"):
            run(deployment, "example_asset_watermark", run_id)
            [row] = deployment.query(
                "SELECT s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id WHERE a.name = 'orders'"
            )
            say(f"   after {run_id}: asset 'orders' watermark = {row['value']}")
        operate(deployment)
    say("\n== Done; the deployment is stopped and its files removed.")


def operate(deployment: Deployment) -> None:
    """What operators see: the same state through the `airflow state` CLI and the REST API."""
    say("\n6. Operators see and fix the state: `airflow state` on the CLI, /state/api/v1 over HTTP")
    run_1 = ("--dag-id", "example_resumable_job", "--run-id", "run_1", "--task-id", "run_job")
    say(f"   $ airflow state list {' '.join(run_1)}")
    for line in deployment.airflow("state", "list", *run_1).strip().splitlines():
        say(f"     {line}")

    token = deployment.token("admin")  # POST /auth/token, as for Airflow's own REST API

    def get(path: str) -> httpx.Response:
        url = deployment.api_url + "/state/api/v1" + path
        return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    path = "/dags/example_mapped_state/dagRuns/mapped_1/state"
    say(f"   GET /state/api/v1{path}")
    for instance in get(path).raise_for_status().json()["task_instances"]:
        say(f"     {instance['task_id']}[{instance['map_index']}]: {instance['key_count']} keys")
    path = "/dags/example_resumable_job/dagRuns/run_1/taskInstances/run_job/state"
    say(f"   GET /state/api/v1{path}")
    for entry in get(path).raise_for_status().json()["entries"]:
        say(f"     {entry['key']} = {json.dumps(entry['value'])} (try {entry['updated_by_try']})")

    say(f"   $ airflow state delete remote_job_id {' '.join(run_1)} -y")
    # The last line: Airflow's write commands check the database first, and its migration tool
    # logs to stdout while doing so.
    deleted = deployment.airflow("state", "delete", "remote_job_id", *run_1, "-y").strip().splitlines()[-1]
    say(f"     {deleted}")
    response = get(path + "Entry?key=remote_job_id")
    reason = response.json()["detail"]["reason"]
    say(f"   GET .../stateEntry?key=remote_job_id: {response.status_code} {reason}")
    say("   (a new try of run_job would now submit a fresh job instead of reconnecting)")


if __name__ == "__main__":
    main()
