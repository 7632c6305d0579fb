"""
The DAG of the upgrade test (tests/test_upgrade_to_airflow33.py): one file, unchanged, run by Airflow
3.2 and then, after the deployment upgraded in place, by Airflow 3.3, both with airflow-task-state
and only its documented task API.

``upgrade_state``, one run on Airflow 3.2: mapped task instances keep a checkpoint, a counter
incremented twice (version 2), a key with an expiry and a staged write (its commit record kept
in the run); ``publish`` keeps a watermark on each of its
assets; ``run_job`` submits a (simulated) remote job, keeps its id under ``remote_job_id``, and then
loses its worker (with ``UPGRADE_TEST_LOSE_WORKER`` set: the run fails with the id kept). After the
upgrade, Airflow 3.3 runs ``run_job`` of that same run again: it must find the id 3.2 wrote and
reconnect to the job instead of submitting a second one (and Airflow 3.3's own accessor, beside
ours, reads the same id).
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, BaseOperator, dag, task
from airflow_task_state.resumable import JobStatus, ResumableJobMixin

# --- the simulated remote system -------------------------------------------------------------------
# Files only: a job is "<id>.submitted" in the jobs folder (the test counts them). Each status query
# appends to "<id>.checks"; the job is running at its first query and succeeded from the second on.


def _jobs() -> Path:
    folder = Path(os.environ["UPGRADE_TEST_JOBS_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class RemoteJobOperator(ResumableJobMixin, BaseOperator):
    poll_interval = 0.2

    def execute(self, context):
        airflows_own = context.get("task_state_store")  # Airflow 3.3's own accessor (none on 3.2)
        if airflows_own is not None:
            self.log.info("Airflow's own accessor reads remote_job_id=%s", airflows_own.get("remote_job_id"))
        return super().execute(context)

    def submit_job(self, context):
        job_id = f"job_{uuid.uuid4().hex[:10]}"
        (_jobs() / f"{job_id}.submitted").write_text("")
        return job_id

    def job_status(self, job_id, context):
        if not (_jobs() / f"{job_id}.submitted").exists():
            return JobStatus.FAILED  # the remote system never heard of it
        with (_jobs() / f"{job_id}.checks").open("a") as checks:
            checks.write("checked\n")
        queries = len((_jobs() / f"{job_id}.checks").read_text().splitlines())
        return JobStatus.RUNNING if queries < 2 else JobStatus.SUCCEEDED

    def job_result(self, job_id, context):
        return f"result of {job_id}"

    def job_stored(self, job_id, context):
        if os.environ.get("UPGRADE_TEST_LOSE_WORKER"):
            raise RuntimeError(f"simulated worker loss after storing {job_id}")


UPGRADE_ASSETS = [
    # ASCII names: Airflow refuses other asset names on MySQL.
    Asset(name="upgrade_orders", uri="s3://upgrade-bucket/orders"),
    Asset(name="upgrade_clicks", uri="s3://upgrade-bucket/clicks"),
]


@dag(dag_id="upgrade_state", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def upgrade_state():
    @task
    def process(partition: int) -> None:
        from airflow_task_state import task_state

        task_state.set("checkpoint", {"rows": partition * 1000, "city": "Zürich", "done": False})
        task_state.increment("batches", by=partition + 1)
        task_state.increment("batches")
        task_state.set("lease", f"worker-{partition}", ttl=timedelta(days=10))
        task_state.stage("summary", {"partition": partition})  # kept when the try succeeds

    @task(outlets=UPGRADE_ASSETS)
    def publish() -> None:
        from airflow_task_state import asset_state

        for number, asset in enumerate(UPGRADE_ASSETS):
            asset_state[asset].set("watermark", {"offset": 100 * (number + 1), "by": "publish"})

    process.expand(partition=[0, 1, 2]) >> publish()
    RemoteJobOperator(task_id="run_job", retries=0)


upgrade_state()
