"""
Whether the task instance a credential names may still read or write its state: still at the
credential's try, and running for writes. A read trusts a check made less than a second ago.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from airflow.utils.state import TaskInstanceState
from airflow_shared.state import TaskScope
from sqlalchemy import Select

from airflow_task_state.airflow_db import event_loop
from airflow_task_state.airflow_db.engine import execute
from airflow_task_state.airflow_db.first_touch import scope_of, task_instance_row
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.errors import forbidden
from airflow_task_state.protocol import Reason

# A read trusts a check of its task instance made this recently (by a read or a write): a try
# reads its own state, which every try of the task instance shares, and one whose task instance has
# just been superseded or deleted can read it this much longer. Writes are checked every time.
READ_CHECK_SECONDS = 1.0
_recently_checked: dict[TaskInstanceClaims, tuple[float, TaskScope]] = {}
_CHECKS_KEPT = 4096


def check_task_instance(
    claims: TaskInstanceClaims, *, write: bool, path_ti_id: str | None = None, succeeded: bool = False
) -> TaskScope:
    """
    The credential's task instance's scope (see scope_of), refused unless it is still at the
    credential's try (each try has a task instance id of its own) and, for writes, running: an ended
    try or a zombie must not overwrite state. With *succeeded*, the try must have succeeded instead.
    """
    if path_ti_id is not None and path_ti_id != claims.ti_id:
        raise forbidden(
            f"a credential for task instance {claims.ti_id} cannot access task instance {path_ti_id}"
        )
    if not write and not succeeded and (recent := recently_checked(claims)) is not None:
        return recent
    return _checked(claims, row_of(task_instance_row(), claims.ti_id), write=write, succeeded=succeeded)


async def check_for_reading_on_event_loop(claims: TaskInstanceClaims) -> TaskScope:
    """
    :func:`check_task_instance` of a read, its statement on the event loop when the last check is
    older than READ_CHECK_SECONDS; only where ``event_loop.available()``. A task that reads now and
    then (a job's status every few seconds) would otherwise send every read to a thread.
    """
    if (recent := recently_checked(claims)) is not None:
        return recent
    outcome = await event_loop.execute(task_instance_row(), {"ti_id": UUID(claims.ti_id)})
    return _checked(claims, _only_row(outcome.rows, claims.ti_id), write=False, succeeded=False)


def _checked(claims: TaskInstanceClaims, row: Any, *, write: bool, succeeded: bool) -> TaskScope:
    """The scope of the task instance *row*, refused as :func:`check_task_instance` says; remembered."""
    dag_id, run_id, task_id, map_index, state, try_number = row[:6]
    if claims != TaskInstanceClaims(claims.ti_id, dag_id, run_id, task_id, map_index, try_number):
        raise forbidden(f"credential does not match task instance {claims.ti_id} and its try {try_number}")
    if write:
        refuse_unless_running(claims.ti_id, state, "write its state")
    if succeeded and state != TaskInstanceState.SUCCESS:
        raise forbidden(
            f"task instance {claims.ti_id} is {state}, not success: only a try that succeeded may "
            "clear its state on success or commit its staged writes (a running task writes its state "
            "directly, e.g. task_state.clear() or task_state.set())"
        )
    scope = scope_of(row)
    remember_check(claims, scope)
    return scope


def recently_checked(claims: TaskInstanceClaims) -> TaskScope | None:
    """The scope a check of *claims* found less than READ_CHECK_SECONDS ago, which a read may trust."""
    recent = _recently_checked.get(claims)
    return recent[1] if recent is not None and time.monotonic() < recent[0] else None


def known_scope(claims: TaskInstanceClaims, path_ti_id: str) -> TaskScope | None:
    """
    The scope an earlier check of *claims* found (of any age), for a write that checks its try in its
    own statement (``manage.put_while_running``): a task instance's scope never changes, and a try
    that no longer runs finds its write refused there. ``None``: no check to go by, check now.
    """
    known = _recently_checked.get(claims) if path_ti_id == claims.ti_id else None
    return known[1] if known is not None else None


def row_of(query: Select[Any], ti_id: str) -> Any:
    """*query*'s row for task instance *ti_id* (a task_instance_row with more columns, or that one)."""
    # One statement on the state engine (autocommit, no pre-ping): this runs on every request.
    return _only_row(execute(query, {"ti_id": UUID(ti_id)}).rows, ti_id)


def _only_row(rows: list[Any], ti_id: str) -> Any:
    if not rows:
        raise forbidden(
            f"task instance {ti_id} does not exist: its try has ended and a newer one started, "
            "or its dag run was deleted"
        )
    return rows[0]


def refuse_unless_running(ti_id: str, state: str | None, doing: str) -> None:
    if state != TaskInstanceState.RUNNING:
        raise forbidden(
            f"task instance {ti_id} is {state}: only a running try may {doing}", Reason.NOT_RUNNING
        )


def remember_check(claims: TaskInstanceClaims, scope: TaskScope) -> None:
    """Let reads with *claims* trust this check of their task instance for READ_CHECK_SECONDS."""
    if len(_recently_checked) >= _CHECKS_KEPT:
        _recently_checked.clear()
    _recently_checked[claims] = (time.monotonic() + READ_CHECK_SECONDS, scope)
