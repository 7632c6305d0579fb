"""
A try's first touch of state: the keys a clear left for the try to discard go before any request
of the try reads (:mod:`airflow_task_state.airflow_db.clears` decides which). Called by the step that
grants a task process its first credential: the proof exchange on API servers, and the in-process
credential under ``dag.test()``. Authentication only decides who is asking; this is what a clear
means for the state it leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any
from uuid import UUID

from airflow.models.dagrun import DagRun
from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.models.taskinstance import TaskInstance
from airflow_shared.state import TaskScope
from sqlalchemy import Select, and_, bindparam, select
from sqlalchemy.orm import Session

from airflow_task_state.airflow_db.clears import (
    boundary_at_first_touch,
    choice_of,
    highest_success_before_current_try,
    undecoded,
)
from airflow_task_state.airflow_db.engine import execute
from airflow_task_state.airflow_db.run_identity import dag_run_uid
from airflow_task_state.configured_backend import get_state_backend

log = logging.getLogger(__name__)


@cache
def _current_try() -> Select[Any]:
    """The task instance's current try, its dag run's identity, and what the clear rule reads."""
    ti, run, rendered = TaskInstance.__table__, DagRun.__table__, RenderedTaskInstanceFields.__table__
    same_task_instance = and_(
        *(rendered.c[column] == ti.c[column] for column in ("dag_id", "run_id", "task_id", "map_index"))
    )
    return (
        select(
            ti.c.dag_id,
            ti.c.run_id,
            ti.c.task_id,
            ti.c.map_index,
            ti.c.try_number,
            ti.c.max_tries,
            run.c.id,
            run.c.created_at,
            run.c.run_after,
            undecoded(rendered.c.rendered_fields),
            highest_success_before_current_try(ti),
        )
        .join_from(ti, run, and_(run.c.dag_id == ti.c.dag_id, run.c.run_id == ti.c.run_id))
        .outerjoin_from(ti, rendered, same_task_instance)
        .where(ti.c.id == bindparam("ti_id"))
    )


def discard_what_a_clear_left(
    ti_id: str, chosen: Mapping[str, Any] | None = None, *, session: Session | None = None
) -> None:
    """
    Remove the keys that earlier tries of task instance *ti_id* wrote when it was cleared since, as
    the task chose (*chosen*: its choice as the handshake records it; by default, as its try
    recorded it among its rendered fields). Every process of a try does it (deferral resumes,
    reschedule pokes): keys written by this try are never among them, so the second time removes
    nothing. A failure raises, and the caller grants no credential: the try must not read a job id
    that its clear meant to forget. A task instance that is gone discards nothing (its requests are
    refused, each saying why). With *session*, in that session's transaction (Airflow's own, for
    its accessors' calls: see :mod:`airflow_task_state.state_store_backend`).
    """
    found: Sequence[Any]
    if session is None:
        found = execute(_current_try(), {"ti_id": UUID(ti_id)}).rows
    else:
        found = session.execute(_current_try(), {"ti_id": UUID(ti_id)}).all()
    if not found:
        return
    dag_id, run_id, task_id, map_index, try_number, max_tries, *run, rendered, succeeded_try = found[0]
    scope = TaskScope(dag_id, run_id, task_id, map_index, dag_run_uid=dag_run_uid(*run))
    discard_at_first_touch(scope, chosen or rendered, try_number, max_tries, succeeded_try, session=session)


def discard_at_first_touch(
    scope: TaskScope,
    recorded: Any,
    try_number: int,
    max_tries: int,
    succeeded_try: int | None,
    *,
    session: Session | None = None,
) -> None:
    """
    :func:`discard_what_a_clear_left`, from what it reads of the try: its *scope*, the choice it
    *recorded* (its rendered fields), its try and max_tries, and the highest try before it archived in
    success (the handshake's proof reads them in its own statement).
    """
    choice = choice_of(recorded, f"{scope.dag_id}.{scope.task_id}")
    boundary = boundary_at_first_touch(scope, choice, try_number, max_tries, succeeded_try)
    if boundary is None:
        return
    removed = get_state_backend().discard_written_through_try(scope, boundary, session=session)
    if removed:
        log.info(
            "Discarded %d key(s) of task instance %s/%s/%s[%d] written by tries up to %d: it was cleared "
            "since (keep_task_state=%s); try %d starts afresh",
            removed,
            scope.dag_id,
            scope.run_id,
            scope.task_id,
            scope.map_index,
            boundary,
            choice.value,
            try_number,
        )
