"""
DAGs of the upgrade test (tests/test_upgrade_to_airflow33.py), parsed by Airflow 3.2 with
airflow-task-state AND by Airflow 3.3 without it, as a user's DAG folder is across the upgrade.

``upgrade_resumable``: one task that submits a (simulated) remote job and keeps its id under
``remote_job_id``. On Airflow 3.2 it uses our ``ResumableJobMixin`` and its worker is "lost" right
after the id is stored (the task raises, retries=0: the run fails with the id stored). The
deployment then upgrades; on Airflow 3.3 the same operator is built on 3.3's own
``ResumableJobMixin`` (same key), which must find the id the upgrade moved and reconnect.

``upgrade_fill``: mapped task instances and assets that hold state written by real task code on
Airflow 3.2. Its task bodies import our accessors only when they run, so Airflow 3.3 parses the file
too (its assets stay active there).
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Asset, BaseOperator, dag, task

# --- the simulated remote system -------------------------------------------------------------------
# Files only, no processes: a job is "<id>.submitted" in the jobs folder (the test counts them).
# Each status query appends to "<id>.checks"; the job reports "running" to its first query and
# "succeeded" from the second on, so a watcher that reconnects sees it running, then finishing,
# whatever time passed since submission.


def _jobs() -> Path:
    folder = Path(os.environ["UPGRADE_TEST_JOBS_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def submit_job() -> str:
    job_id = f"job_{uuid.uuid4().hex[:10]}"
    (_jobs() / f"{job_id}.submitted").write_text("")
    return job_id


def job_status(job_id: str) -> str:
    if not (_jobs() / f"{job_id}.submitted").exists():
        return "failed"  # the remote system never heard of it
    with (_jobs() / f"{job_id}.checks").open("a") as checks:
        checks.write("checked\n")
    queries = len((_jobs() / f"{job_id}.checks").read_text().splitlines())
    return "running" if queries < 2 else "succeeded"


def job_result(job_id: str) -> str:
    return f"result of {job_id}"


try:  # Airflow 3.3 and later: the mixin ships with the Task SDK.
    from airflow.sdk.bases.resumablejobmixin import ResumableJobMixin as SdkResumableJobMixin
except ImportError:  # Airflow 3.2 with airflow-task-state
    SdkResumableJobMixin = None


if SdkResumableJobMixin is not None:

    class RemoteJobOperator(SdkResumableJobMixin, BaseOperator):
        """Airflow 3.3: the job id lives in ``context["task_state_store"]`` under "remote_job_id"."""

        def execute(self, context):
            return self.execute_resumable(context)

        def submit_job(self, context):
            return submit_job()

        def get_job_status(self, external_id, context):
            return job_status(external_id)

        def is_job_active(self, status):
            return status == "running"

        def is_job_succeeded(self, status):
            return status == "succeeded"

        def poll_until_complete(self, external_id, context):
            while (status := job_status(external_id)) == "running":
                time.sleep(0.2)
            if status != "succeeded":
                raise RuntimeError(f"remote job {external_id} {status}")

        def get_job_result(self, external_id, context):
            return job_result(external_id)

else:
    from airflow_task_state.worker.resumable import ResumableJobMixin

    class RemoteJobOperator(ResumableJobMixin, BaseOperator):  # type: ignore[no-redef]
        """Airflow 3.2 with airflow-task-state: the job id lives in task state under "remote_job_id"."""

        poll_interval = 0.2

        def submit_job(self, context):
            return submit_job()

        def job_status(self, job_id, context):
            return job_status(job_id)

        def job_result(self, job_id, context):
            return job_result(job_id)

        def job_stored(self, job_id, context):
            # The worker is lost once the id is safe: the upgrade happens before the retry.
            raise RuntimeError(f"simulated worker loss after storing {job_id}")


with DAG(dag_id="upgrade_resumable", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    RemoteJobOperator(task_id="run_job", retries=0)


# --- state written by real task code on Airflow 3.2 -----------------------------------------------

UPGRADE_ASSETS = [
    # ASCII names: Airflow refuses other asset names on MySQL.
    Asset(name="upgrade_orders", uri="s3://upgrade-bucket/orders"),
    Asset(name="upgrade_customers", uri="s3://upgrade-bucket/customers"),
    Asset(name="upgrade_clicks", uri="s3://upgrade-bucket/clicks"),
]


@dag(dag_id="upgrade_fill", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def upgrade_fill():
    @task
    def partitions() -> list[int]:
        return [0, 1, 2]

    @task
    def process(partition: int) -> None:
        from airflow_task_state import task_state

        task_state.set("partition", partition)
        task_state.set("checkpoint", {"rows": partition * 1000, "city": "Zürich", "done": False})

    @task(outlets=UPGRADE_ASSETS)
    def publish() -> None:
        from airflow_task_state import asset_state

        for number, asset in enumerate(UPGRADE_ASSETS):
            asset_state[asset].set("watermark", {"offset": 100 * (number + 1), "by": "publish"})

    process.expand(partition=partitions()) >> publish()


upgrade_fill()
