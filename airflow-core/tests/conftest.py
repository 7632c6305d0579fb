from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _migrated(airflow_db) -> None:
    """Every test here runs on a migrated metadata database."""


@pytest.fixture
def unique() -> str:
    """A suffix that keeps one test's rows apart from every other test's."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def make_dag_run() -> Iterator[Callable[[str, str], int]]:
    """Create real dag_run rows; return ``make(dag_id, run_id) -> dag_run.id``. Removed afterwards."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import delete, select

    created: dict[tuple[str, str], int] = {}

    def make(dag_id: str, run_id: str) -> int:
        if (dag_id, run_id) not in created:
            with create_session() as session:
                session.add(
                    DagRun(
                        dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING
                    )
                )
            with create_session() as session:
                created[(dag_id, run_id)] = session.scalar(
                    select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
                )
        return created[(dag_id, run_id)]

    yield make
    with create_session() as session:
        for dag_run_id in created.values():
            session.execute(delete(DagRun).where(DagRun.id == dag_run_id))


@pytest.fixture
def make_task_instances(make_dag_run) -> Iterator[Callable[..., None]]:
    """``make(dag_id, run_id, ("task", -1), ("mapped", 0), ...)``: a dag run with these task instances."""

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert

    made: list[tuple[str, str]] = []

    def make(dag_id: str, run_id: str, *task_instances: tuple[str, int]) -> None:
        make_dag_run(dag_id, run_id)
        made.append((dag_id, run_id))
        with create_session() as session:
            for task_id, map_index in task_instances:
                session.execute(
                    insert(TaskInstance).values(
                        dag_id=dag_id,
                        run_id=run_id,
                        task_id=task_id,
                        map_index=map_index,
                        pool="default_pool",
                    )
                )

    yield make
    with create_session() as session:
        for dag_id, run_id in made:
            session.execute(
                delete(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
            )


@pytest.fixture
def make_asset(unique) -> Iterator[Callable[[int], int]]:
    """Create real asset rows; return ``make(n) -> asset.id`` for the n-th asset of the test."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    created: dict[int, int] = {}

    def make(n: int) -> int:
        if n not in created:
            with create_session() as session:
                asset = AssetModel(
                    name=f"state_{unique}_{n}", uri=f"s3://state-tests/{unique}/{n}", group="asset"
                )
                session.add(asset)
                session.flush()
                created[n] = asset.id
        return created[n]

    yield make
    with create_session() as session:
        session.execute(delete(AssetModel).where(AssetModel.id.in_(created.values())))


@pytest.fixture
def backend():
    from airflow_task_state.metastore import MetastoreStateBackend

    return MetastoreStateBackend()


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """A file:// object store, configured as workers and `airflow state clean` read it."""
    root = tmp_path / "objects"
    root.mkdir()
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{root}")
    return root
