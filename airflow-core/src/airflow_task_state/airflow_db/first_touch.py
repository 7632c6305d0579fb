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
def task_instance_row() -> Select[Any]:
    """
    The task instance (bound as ``ti_id``) at its current try, and its dag run's identity: what the
    state API checks on every request of a try (:mod:`airflow_task_state.api.task_instance_checks`).
    """
    ti, run = TaskInstance.__table__, DagRun.__table__
    return (
        select(
            ti.c.dag_id,
            ti.c.run_id,
            ti.c.task_id,
            ti.c.map_index,
            ti.c.state,
            ti.c.try_number,
            run.c.id,
            run.c.created_at,
            run.c.run_after,
        )
        .join_from(ti, run, and_(run.c.dag_id == ti.c.dag_id, run.c.run_id == ti.c.run_id))
        .where(ti.c.id == bindparam("ti_id"))
    )


@cache
def first_touch_row() -> Select[Any]:
    """
    :func:`task_instance_row` with what the try's first touch reads too: max_tries, the highest try
    before the current one archived in success, and the rendered fields, as JSON text.
    """
    ti, rendered = TaskInstance.__table__, RenderedTaskInstanceFields.__table__
    same_task_instance = and_(
        *(rendered.c[column] == ti.c[column] for column in ("dag_id", "run_id", "task_id", "map_index"))
    )
    return (
        task_instance_row()
        .outerjoin_from(ti, rendered, same_task_instance)
        .add_columns(
            ti.c.max_tries, highest_success_before_current_try(ti), undecoded(rendered.c.rendered_fields)
        )
    )


def scope_of(row: Any) -> TaskScope:
    """A task_instance_row's scope: a run deleted and created again under its run_id starts empty."""
    dag_id, run_id, task_id, map_index, _, _, dag_run_id, created_at, run_after = row[:9]
    return TaskScope(
        dag_id, run_id, task_id, map_index, dag_run_uid=dag_run_uid(dag_run_id, created_at, run_after)
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
        found = execute(first_touch_row(), {"ti_id": UUID(ti_id)}).rows
    else:
        found = session.execute(first_touch_row(), {"ti_id": UUID(ti_id)}).all()
    if found:
        discard_at_first_touch(found[0], chosen, session=session)


def discard_at_first_touch(
    row: Any, chosen: Mapping[str, Any] | None = None, *, session: Session | None = None
) -> None:
    """
    :func:`discard_what_a_clear_left`, from the try's :func:`first_touch_row` (the handshake's proof
    reads it in its own statement).
    """
    *_, max_tries, succeeded_try, rendered = row
    scope, try_number = scope_of(row), row[5]  # task_instance_row's columns come first
    choice = choice_of(chosen or rendered, f"{scope.dag_id}.{scope.task_id}")
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
