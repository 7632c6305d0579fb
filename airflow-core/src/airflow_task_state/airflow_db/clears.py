"""
What a clear discards: the one place that reads Airflow's try history to tell a clear from a retry
(docs/clearing.md says what each choice keeps, and why).

Airflow 3.2 has no hook on clear, but every way of clearing ends in ``clear_task_instances``, which
archives the cleared try in ``task_instance_history`` with its state (unless a retry archived it
already). So the decision is made when the next try first touches state, from the history of the
same task instance:

- a row in any state but ``failed`` comes only from a clear: a retry, a heartbeat timeout and an
  orphan reset archive a try that is still running or queued, which Airflow records as ``failed``;
  a row in ``success`` is a clear of a successful try;
- a clear sets ``max_tries`` to ``try_number + retries`` (a clear of a running try: once its
  process ends), while a retry keeps it: so a clear came after try *k* when the ``max_tries``
  archived with try *k* differs from the next try's.

A try archived as ``failed`` and cleared after the task's ``retries`` were lowered by as many tries
as it used leaves ``max_tries`` as a retry would, and Airflow records nothing else of that clear on
the task instance (the dag run's ``clear_number`` counts the clears of every task of the run): it
is taken for a retry, and its state kept.

The *discard boundary* of a try is the highest earlier try whose keys go (with those of the tries
before it), or ``None``: what :meth:`BaseStateBackend.discard_written_through_try` takes. Keys of
later tries, or of operators (no try), always stay, so deciding again (every process of a try
does: deferral resumes, sensor pokes) changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
from airflow.models.taskinstance import TaskInstance as TI
from airflow.models.taskinstancehistory import TaskInstanceHistory as TIH
from airflow.utils.session import create_session
from sqlalchemy import String, Text, cast, func, literal_column, select

from airflow_task_state import config
from airflow_task_state.airflow_db.lookups import of_run
from airflow_task_state.keep_choice import KEEP_FIELD, TASK_ATTRIBUTE, KeepTaskState, parse_keep_choice

if TYPE_CHECKING:
    from airflow_shared.state.scopes import TaskScope
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

SUCCESS = "success"
#: The only state a retry, a heartbeat timeout or an orphan reset archives a try in.
FAILED = "failed"


class ArchivedTry(NamedTuple):
    """A row of ``task_instance_history``: the try, the state it was archived in, its ``max_tries``."""

    try_number: int
    state: str | None
    max_tries: int | None


def boundary_at_first_touch(
    scope: TaskScope, choice: KeepTaskState, try_number: int, max_tries: int | None, succeeded_try: int | None
) -> int | None:
    """
    :func:`discard_boundary` for the current try of *scope*, as its first touch of state decides it:
    ``after_failure`` takes *succeeded_try*, which the caller's own query read with
    :func:`highest_success_before_current_try`; only ``never`` reads the whole try history.
    """
    if choice is not KeepTaskState.NEVER:
        return None if choice is KeepTaskState.ALWAYS else succeeded_try
    with create_session() as session:
        history = _archived(session, scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
    return discard_boundary(choice, try_number, max_tries, history.get((scope.task_id, scope.map_index), []))


def discard_boundary(
    choice: KeepTaskState, current_try: int, current_max_tries: int | None, history: Iterable[ArchivedTry]
) -> int | None:
    """
    The highest try whose keys *current_try* discards under *choice*, or ``None``: with
    ``after_failure``, the last earlier try that was cleared in success; with ``never``, that or
    the last earlier try followed by any clear; with ``always``, none.
    """
    if choice is KeepTaskState.ALWAYS:
        return None
    earlier = sorted((archived for archived in history if archived.try_number < current_try), reverse=True)
    boundary = next((archived.try_number for archived in earlier if archived.state == SUCCESS), None)
    if choice is KeepTaskState.NEVER:
        following_max_tries = current_max_tries
        for archived in earlier:  # the latest first: the first clear found is the last one
            if archived.state != FAILED or archived.max_tries != following_max_tries:
                return max(archived.try_number, boundary or 0)
            following_max_tries = archived.max_tries
    return boundary


def decoded(rendered_fields: Any) -> dict[str, Any] | None:
    """
    A try's rendered fields as a dict (``None``: none, or not a JSON object), from the text that
    :func:`undecoded` reads, or from a dict the caller already holds.
    """
    if isinstance(rendered_fields, str | bytes):
        try:
            rendered_fields = json.loads(rendered_fields)
        # Only a direct write to the database leaves text that is not JSON, or JSON nested deeper
        # than Python decodes: neither may break the API server, nor prove anything.
        except (ValueError, RecursionError):
            return None
    return rendered_fields if isinstance(rendered_fields, dict) else None


def undecoded(rendered_fields: Any) -> Any:
    """
    The rendered-fields column read as JSON text, on every database and driver, for decoded(): SQLAlchemy's
    JSON type raises on text that is not JSON, and psycopg2 decodes a JSON column itself (a JSON
    string holding an object would then be decoded twice, and nesting too deep raises).
    """
    return cast(rendered_fields, Text).label("rendered_fields")


def choice_of(rendered_fields: Any, task: str) -> KeepTaskState:
    """
    The task's choice as its try recorded it among *rendered_fields* (written by the try's
    supervisor, so by the DAG's code), else ``[state] keep_task_state``. A value that is not a
    choice is the deployment's default: a DAG cannot break the API server with it.
    """
    recorded = (decoded(rendered_fields) or {}).get(KEEP_FIELD)
    if recorded is not None:
        try:
            return parse_keep_choice(recorded, f"{task}.{TASK_ATTRIBUTE}")
        except ValueError as error:
            log.warning("%s; following [state] keep_task_state instead", error)
    return config.keep_task_state()


# --- reading Airflow's tables ----------------------------------------------------------------


def highest_success_before_current_try(ti: Any) -> Any:
    """
    A scalar subquery for a query on ``task_instance`` *ti*: the highest try of that task instance
    before its current one archived in success (``None``: none), what ``after_failure`` discards.
    """
    tih = TIH.__table__
    # A literal, not a bound parameter: the proof's query runs on the autocommit engine, which
    # binds only the parameters it is given.
    success = literal_column(f"'{SUCCESS}'", String())
    return (
        select(func.max(tih.c.try_number))
        .where(
            *(tih.c[column] == ti.c[column] for column in ("dag_id", "run_id", "task_id", "map_index")),
            tih.c.try_number < ti.c.try_number,
            tih.c.state == success,
        )
        .scalar_subquery()
    )


def _archived(db: Session, *identity: Any) -> dict[tuple[str, int], list[ArchivedTry]]:
    """The archived tries of the task instances *identity* names (as ``of_run``), by task id and map index."""
    query = select(TIH.task_id, TIH.map_index, TIH.try_number, TIH.state, TIH.max_tries)
    history: dict[tuple[str, int], list[ArchivedTry]] = {}
    for task_id, map_index, *archived in db.execute(of_run(query, TIH, *identity)):
        history.setdefault((task_id, map_index), []).append(ArchivedTry(*archived))
    return history


def runs_with_archived_tries(session: Session) -> list[tuple[str, str]]:
    """``(dag_id, run_id)`` of every run with an archived try: where a clear can have left keys."""
    return [(dag_id, run_id) for dag_id, run_id in session.execute(select(TIH.dag_id, TIH.run_id).distinct())]


def pending_boundaries(
    dag_id: str,
    run_id: str,
    session: Session | None = None,
    *,
    task_id: str | None = None,
    map_index: int | None = None,
) -> dict[tuple[str, int], int]:
    """
    What operators must not see as live: for each task instance of the run (or the one named) whose
    current try, or the try a clear has it waiting for, discards keys, its discard boundary, by
    ``(task_id, map_index)``. The keys are still stored until that try first touches state; an
    instance missing here discards nothing. Three queries at most, whatever the run's size.

    The task's choice is read where the last try that touched state recorded it. An instance with
    no record there is left out: nothing is hidden or removed on a guess. Airflow prunes the
    rendered fields of older runs, and a starting try's task runner replaces them before the try
    records its choice; the deployment's default in their place would take from a task that keeps
    its state on a clear what it kept. That try decides at its first touch, as always.
    """
    identity = (dag_id, run_id, task_id, map_index)
    with create_session() if session is None else nullcontext(session) as db:
        history = _archived(db, *identity)
        if not history:  # never cleared nor retried: the common case costs one query
            return {}
        instances = db.execute(
            of_run(select(TI.task_id, TI.map_index, TI.try_number, TI.max_tries), TI, *identity)
        ).all()
        rendered = select(RTIF.task_id, RTIF.map_index, undecoded(RTIF.rendered_fields))
        fields = {
            (row.task_id, row.map_index): row.rendered_fields
            for row in db.execute(of_run(rendered, RTIF, *identity))
        }
        boundaries = {}
        for task, index, try_number, max_tries in instances:
            archived = history.get((task, index))
            recorded = decoded(fields.get((task, index))) or {}
            if archived and KEEP_FIELD in recorded:
                choice = choice_of(recorded, task)
                boundary = discard_boundary(choice, pending_try(try_number, archived), max_tries, archived)
                if boundary is not None:
                    boundaries[(task, index)] = boundary
    return boundaries


def pending_try(try_number: int, history: Sequence[ArchivedTry]) -> int:
    """
    The try a task instance at *try_number* is at or waiting for: the next one once its current try
    is archived (cleared, or failed with retries left, and not scheduled again yet: the number goes
    up only when it is), else that one (running, finished, or scheduled after a clear).
    """
    return try_number + 1 if any(archived.try_number == try_number for archived in history) else try_number
