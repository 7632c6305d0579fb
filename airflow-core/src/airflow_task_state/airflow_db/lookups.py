"""
Airflow's own tables as operators name what is in them: a dag run by dag id and run id, a task
instance, an asset by id, name or URI. What does not exist raises :class:`NotFound`, so that a
typo never silently reads (or writes) an empty scope. Server-side only: the ORM is no cost there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow_shared.state import TaskScope
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from airflow_task_state.airflow_db.run_identity import uid_of_run
from airflow_task_state.protocol import Reason


class NotFound(LookupError):
    """The dag run, task instance, asset or key an operator named does not exist."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class AssetInfo:
    """An asset as operators know it."""

    asset_id: int
    name: str
    uri: str
    group: str


def of_run(
    query: Any, model: Any, dag_id: str, run_id: str, task_id: str | None = None, map_index: int | None = None
) -> Any:
    """*query* narrowed to *model*'s rows of the run (of one task, and one map index, when named)."""
    query = query.where(model.dag_id == dag_id, model.run_id == run_id)
    if task_id is not None:
        query = query.where(model.task_id == task_id)
    if map_index is not None:
        query = query.where(model.map_index == map_index)
    return query


def find_dag_run_uid(dag_id: str, run_id: str, session: Session) -> str:
    """The ``dag_run_uid`` of the run, or :class:`NotFound` (``dag_run_not_found``)."""
    uid = uid_of_run(dag_id, run_id, session)
    if uid is None:
        raise NotFound(Reason.DAG_RUN_NOT_FOUND, f"no dag run with dag_id={dag_id!r} and run_id={run_id!r}")
    return uid


def find_task_scope(
    dag_id: str, run_id: str, task_id: str, map_index: int | None, session: Session
) -> TaskScope:
    """
    The scope of a task instance that exists, or :class:`NotFound` (unlike
    ``run_identity.task_scope``, which needs only the dag run). ``map_index=None``: any map index
    (a mapped task has none at -1), the scope that ``clear(all_map_indices=True)`` takes.
    """
    uid = find_dag_run_uid(dag_id, run_id, session)
    query = of_run(select(TaskInstance.map_index), TaskInstance, dag_id, run_id, task_id, map_index)
    found = session.scalar(query.limit(1))
    if found is None:
        mapped = "" if map_index in (None, -1) else f" with map_index={map_index}"
        raise NotFound(
            Reason.TASK_INSTANCE_NOT_FOUND,
            f"dag run {dag_id!r}/{run_id!r} has no task instance {task_id!r}{mapped}",
        )
    return TaskScope(dag_id, run_id, task_id, found, dag_run_uid=uid)


def task_scopes_of_run(dag_id: str, run_id: str, session: Session) -> list[TaskScope]:
    """Every task instance of the run (:class:`NotFound` without it), sorted by task id and map index."""
    uid = find_dag_run_uid(dag_id, run_id, session)
    query = of_run(select(TaskInstance.task_id, TaskInstance.map_index), TaskInstance, dag_id, run_id)
    rows = session.execute(query.order_by(TaskInstance.task_id, TaskInstance.map_index))
    return [TaskScope(dag_id, run_id, row.task_id, row.map_index, dag_run_uid=uid) for row in rows]


def dag_runs(dag_id: str | None, run_id: str | None, *, page_size: int) -> Iterator[tuple[str, str]]:
    """``(dag_id, run_id)`` of the dag runs, in order of ids, a page at a time (each its own session)."""
    last_id = None
    while True:
        query = select(DagRun.id, DagRun.dag_id, DagRun.run_id).order_by(DagRun.id).limit(page_size)
        if last_id is not None:
            query = query.where(DagRun.id > last_id)
        if dag_id is not None:
            query = query.where(DagRun.dag_id == dag_id)
        if run_id is not None:
            query = query.where(DagRun.run_id == run_id)
        with create_session() as session:
            page = session.execute(query).all()
        if not page:
            return
        yield from ((row.dag_id, row.run_id) for row in page)
        last_id = page[-1].id


_ASSETS = select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetModel.group)


def _assets(query: Select[Any], session: Session) -> list[AssetInfo]:
    return [AssetInfo(*row) for row in session.execute(query)]


def every_asset(session: Session) -> list[AssetInfo]:
    """Every asset, sorted by name and URI."""
    return _assets(_ASSETS.order_by(AssetModel.name, AssetModel.uri), session)


def matching_assets(
    session: Session,
    *,
    asset_id: int | None = None,
    name: str | None = None,
    uri: str | None = None,
    one: bool = False,
) -> list[AssetInfo]:
    """
    The assets with this id, name and/or URI; :class:`NotFound` when none match, or with *one* when
    several do (a name alone may match several).
    """
    wanted = {"id": asset_id, "name": name, "uri": uri}
    described = " and ".join(f"{column}={value!r}" for column, value in wanted.items() if value is not None)
    if not described:
        raise ValueError("name the asset by its id, its name or its URI")
    query = _ASSETS.limit(2 if one else None)
    for column, value in wanted.items():
        if value is not None:
            query = query.where(getattr(AssetModel, column) == value)
    matches = _assets(query, session)
    if not matches:
        raise NotFound(Reason.ASSET_NOT_FOUND, f"no asset with {described}")
    if len(matches) > 1 and one:
        raise NotFound(
            Reason.ASSET_NOT_FOUND, f"{described} names several assets; give the asset's id or its URI too"
        )
    return matches


def find_asset(
    session: Session, *, asset_id: int | None = None, name: str | None = None, uri: str | None = None
) -> AssetInfo:
    """The one asset with this id, or this name and/or URI."""
    return matching_assets(session, asset_id=asset_id, name=name, uri=uri, one=True)[0]
