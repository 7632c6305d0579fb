"""
The identity of one incarnation of a dag run (``dag_run_uid``: a run deleted and created again with
the same ``run_id`` starts with empty task state, see docs/reliability.md), and complete task scopes built
from the database. The run's id alone is not enough: SQLite gives a deleted highest row's id to the
next insert (Airflow's ``dag_run`` table has no AUTOINCREMENT), so its creation instant is added.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

from airflow_shared.state import TaskScope, dag_run_uid

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = ["dag_run_uid", "task_scope", "uid_of_run"]


def uid_of_run(dag_id: str, run_id: str, session: Session | None = None) -> str | None:
    """The ``dag_run_uid`` of the dag run, or ``None`` when there is no such run."""
    # Imported here: importing this module (as ``airflow_task_state`` does) must not load the ORM.
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(DagRun.id, DagRun.created_at, DagRun.run_after).where(
        DagRun.dag_id == dag_id, DagRun.run_id == run_id
    )
    with create_session() if session is None else nullcontext(session) as db:
        row = db.execute(query).one_or_none()
    return None if row is None else dag_run_uid(row.id, row.created_at, row.run_after)


def task_scope(
    dag_id: str, run_id: str, task_id: str, map_index: int = -1, *, session: Session | None = None
) -> TaskScope:
    """
    The complete ``TaskScope`` of a task instance, ``dag_run_uid`` included (``ValueError`` without
    the dag run; the task instance need not exist yet), for server processes that address task
    state through a backend directly. Operators' surfaces use ``lookups.find_task_scope``, which
    also refuses a task instance that does not exist.
    """
    uid = uid_of_run(dag_id, run_id, session)
    if uid is None:
        raise ValueError(f"No DagRun found for dag_id={dag_id!r}, run_id={run_id!r}")
    return TaskScope(dag_id, run_id, task_id, map_index, dag_run_uid=uid)
