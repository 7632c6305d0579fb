"""The story AIP-103 exists for, told against the configured backend and a real metadata database."""

from __future__ import annotations

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.state import get_state_backend
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunType
from airflow_shared.state import AssetScope, TaskScope
from sqlalchemy import select

DAG_ID = "spark_pipeline"


def create_dag_run(run_id: str) -> None:
    with create_session() as session:
        session.add(
            DagRun(dag_id=DAG_ID, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
        )


def create_asset(uri: str) -> int:
    with create_session() as session:
        session.add(AssetModel(name=uri, uri=uri, group="asset"))
    with create_session() as session:
        return session.scalar(select(AssetModel.id).where(AssetModel.uri == uri))


def submit_or_reconnect(scope: TaskScope, try_number: int, job_name: str) -> str:
    """What a resumable operator does on each try."""
    backend = get_state_backend()
    job_id = backend.get(scope, "remote_job_id")
    if job_id is None:
        job_id = job_name
        backend.set(scope, "remote_job_id", job_id)
        print(f"   try {try_number}: no job in task state -> submitted {job_id}, stored remote_job_id")
    else:
        print(
            f"   try {try_number}: found remote_job_id={job_id} in task state"
            " -> reconnected, nothing resubmitted"
        )
    return job_id


def main() -> None:
    backend = get_state_backend()
    print(f"== backend: {type(backend).__module__}.{type(backend).__name__}\n")

    create_dag_run("run_1")
    create_dag_run("run_2")
    scope = TaskScope(DAG_ID, "run_1", "submit_spark_job")

    print("1. Task state is shared by every try of a task instance")
    submit_or_reconnect(scope, 1, "app_001")
    print("   try 1: worker killed before the job finished; the scheduler retries the task")
    assert submit_or_reconnect(scope, 2, "app_002") == "app_001"

    print("\n2. Each dag run starts with a clean namespace")
    fresh = TaskScope(DAG_ID, "run_2", "submit_spark_job")
    print(f"   run_2 reads remote_job_id -> {backend.get(fresh, 'remote_job_id')!r}")
    submit_or_reconnect(fresh, 1, "app_003")

    print("\n3. Mapped task instances keep separate state")
    for map_index in (0, 1, 2):
        backend.set(
            TaskScope(DAG_ID, "run_1", "process_partition", map_index), "offset", str(map_index * 1000)
        )
    for map_index in (0, 1, 2):
        value = backend.get(TaskScope(DAG_ID, "run_1", "process_partition", map_index), "offset")
        print(f"   process_partition[{map_index}] offset = {value}")

    print("\n4. Asset state outlives runs: a watermark written by run_1 is read by run_2")
    asset = AssetScope(create_asset("s3://warehouse/orders"))
    backend.set(asset, "watermark", "2026-11-29T00:00:00+00:00")
    print("   run_1 wrote watermark = 2026-11-29T00:00:00+00:00")
    print(f"   run_2 reads watermark = {backend.get(asset, 'watermark')}")

    print("\n5. Deleting a dag run deletes its task state (foreign-key cascade)")
    with create_session() as session:
        session.delete(session.scalar(select(DagRun).where(DagRun.run_id == "run_1")))
    print(f"   after deleting run_1: remote_job_id -> {backend.get(scope, 'remote_job_id')!r}")
    print(f"   run_2 still has remote_job_id -> {backend.get(fresh, 'remote_job_id')!r}")


if __name__ == "__main__":
    main()
