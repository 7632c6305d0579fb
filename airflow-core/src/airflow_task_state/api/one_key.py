"""
Reading and writing one key of a scope, the calls task code makes most: what the get and set
routes answer, whether FastAPI resolved the request (:mod:`.routes`) or the route read a plain one
itself (:mod:`.plain_requests`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

from airflow_shared.state import StateScope, StateWriter, TaskScope
from fastapi import Response, status
from pydantic import BaseModel

from airflow_task_state import codec, manage
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.datamodels import StateValueResponse, StateWriteResponse
from airflow_task_state.api.errors import refusal
from airflow_task_state.api.params import WriteBody
from airflow_task_state.api.task_instance_checks import check_task_instance, known_scope
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.exceptions import TryNotRunning
from airflow_task_state.protocol import Reason


def answer(model: BaseModel) -> Response:
    """
    *model* as the route's JSON answer, as built: FastAPI would validate it again against the
    route's response model (a values' whole JSON tree), in a second trip to the thread pool, on
    every request of task code. The response model still documents the route.
    """
    return Response(model.model_dump_json(), media_type="application/json")


class ScopeAccess:
    """
    A route's scope, found and its task instance checked by the route itself, as it reads or as it
    writes: so the dependency stays async (no thread pool hop) and runs after the body is read.
    *known*: the scope without a check, for a write that checks its try in its own statement.
    """

    def __init__(
        self, checked: Callable[[bool], StateScope], known: Callable[[], TaskScope | None] = lambda: None
    ) -> None:
        self._checked = checked  # takes whether the route writes
        self.known = known

    def for_reading(self) -> StateScope:
        return self._checked(False)

    def for_writing(self) -> StateScope:
        return self._checked(True)


def task_instance_access(claims: TaskInstanceClaims, task_instance_id: str) -> ScopeAccess:
    """The state of the task instance in the path, which only that task instance's credential reaches."""
    return ScopeAccess(
        lambda write: check_task_instance(claims, write=write, path_ti_id=task_instance_id),
        lambda: known_scope(claims, task_instance_id),
    )


def writer_of(claims: TaskInstanceClaims) -> StateWriter:
    return StateWriter.task_try(
        claims.dag_id, claims.run_id, claims.task_id, claims.map_index, claims.try_number
    )


def read_value(access: ScopeAccess, key: str) -> Response:
    # One backend call on this hot path: the versioned read where the backend keeps versions.
    scope, backend = access.for_reading(), get_state_backend()
    version = None
    if backend.supports_versions:
        versioned = backend.get_versioned(scope, key)
        stored, version = (versioned.value, versioned.version) if versioned else (None, None)
    else:
        stored = backend.get(scope, key)
    if stored is None:
        raise refusal(status.HTTP_404_NOT_FOUND, Reason.KEY_NOT_FOUND, f"no state under key {key!r}")
    return answer(StateValueResponse.model_construct(key=key, value=codec.decode(stored), version=version))


def write_value(
    access: ScopeAccess, claims: TaskInstanceClaims, key: str, body: WriteBody, if_version: int | None = None
) -> Response:
    # The backend raises StateConflictError (409) and StateCapabilityError (501): see errors.py.
    writer, written = writer_of(claims), None
    known = access.known() if if_version is None else None
    # The check that the try still runs, made by the write's own statement where the backend can;
    # when it wrote nothing, the check below says why (or finds the try running again).
    if known is not None:
        with suppress(TryNotRunning):
            written = manage.put_while_running(
                known, key, body.text, ttl=body.ttl, writer=writer, ti_id=claims.ti_id
            )
    if written is None:
        written = manage.put(
            access.for_writing(),
            key,
            body.text,
            ttl=body.ttl,
            if_version=if_version,
            writer=writer,
            by_running_try=True,
        )
    return answer(StateWriteResponse.model_construct(key=key, version=written.version))
