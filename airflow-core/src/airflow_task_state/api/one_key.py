"""
Reading and writing one key of a scope, the calls task code makes most: what the get, set and
increment routes answer, whether FastAPI resolved the request (:mod:`.routes`) or a plain one was
served before the app's routing (:mod:`.plain_requests`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from functools import lru_cache
from typing import Any, TypeVar

from airflow_shared.state import StateScope, StateWriter, TaskScope, VersionedValue
from fastapi import Response, status
from pydantic import BaseModel
from pydantic_core import to_json

from airflow_task_state import codec, manage
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.datamodels import StateIncrementResponse, StateValueResponse, StateWriteResponse
from airflow_task_state.api.errors import refusal, refused_as
from airflow_task_state.api.params import IncrementBody, WriteBody
from airflow_task_state.api.task_instance_checks import (
    check_for_reading_on_event_loop,
    check_task_instance,
    known_scope,
)
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.exceptions import TryNotRunning
from airflow_task_state.protocol import Reason

T = TypeVar("T")


def answer(model: type[BaseModel], **fields: Any) -> Response:
    """
    The route's JSON answer: *model*'s *fields* (all of them, given in its order), in the bytes its
    ``model_dump_json`` gives, by the same serializer (pydantic's ``to_json``), without building the
    model (which costs more than the serializing). FastAPI would validate it again against the
    route's response model (a values' whole JSON tree), in a second trip to the thread pool, on every
    request of task code. The response model still documents the route.
    """
    assert fields.keys() == model.model_fields.keys(), f"{model.__name__}: {list(model.model_fields)}"
    return Response(to_json(fields), media_type="application/json")


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


@lru_cache(maxsize=1024)  # a try writes many times: its writer is built and checked once
def writer_of(claims: TaskInstanceClaims) -> StateWriter:
    return StateWriter.task_try(
        claims.dag_id, claims.run_id, claims.task_id, claims.map_index, claims.try_number
    )


def read_value(access: ScopeAccess, key: str) -> Response:
    # One backend call on this hot path: the versioned read where the backend keeps versions.
    scope, backend = access.for_reading(), get_state_backend()
    if backend.supports_versions:
        return _versioned_answer(key, backend.get_versioned(scope, key))
    return _value_answer(key, backend.get(scope, key), None)


def _versioned_answer(key: str, versioned: VersionedValue | None) -> Response:
    if versioned is None:
        return _value_answer(key, None, None)
    return _value_answer(key, versioned.value, versioned.version)


def _value_answer(key: str, stored: str | None, version: int | None) -> Response:
    if stored is None:
        raise refusal(status.HTTP_404_NOT_FOUND, Reason.KEY_NOT_FOUND, f"no state under key {key!r}")
    return answer(StateValueResponse, key=key, value=codec.decode(stored), version=version)


async def read_on_event_loop(claims: TaskInstanceClaims, key: str) -> Response | None:
    """
    :func:`read_value` of the credential's task instance, on the event loop, its task instance
    checked there too when its last check is more than a second old; ``None`` when the backend
    cannot, and the caller calls :func:`read_value` in a thread.
    """
    read = manage.on_event_loop(get_state_backend(), "get_versioned")
    if read is None:
        return None
    return _versioned_answer(key, await read(await check_for_reading_on_event_loop(claims), key))


async def write_on_event_loop(claims: TaskInstanceClaims, key: str, body: WriteBody) -> Response | None:
    """
    :func:`write_value` without ``if_version``, on the event loop, its try checked in its own
    statement: ``None`` when the backend cannot, when no request of the try has checked its task
    instance yet, or when the try seems not to run, and the caller calls :func:`write_value` in a
    thread (which says why it refuses, or finds the try running again).
    """
    scope = known_scope(claims, claims.ti_id)
    if scope is None:
        return None
    try:
        written = await manage.put_on_event_loop(
            scope, key, body.text, ttl=body.ttl, writer=writer_of(claims), ti_id=claims.ti_id
        )
    except TryNotRunning:
        return None
    if written is None:
        return None
    return answer(StateWriteResponse, key=key, version=written.version)


def write_value(
    access: ScopeAccess, claims: TaskInstanceClaims, key: str, body: WriteBody, if_version: int | None = None
) -> Response:
    # The backend raises StateConflictError (409) and StateCapabilityError (501): see errors.py.
    writer = writer_of(claims)
    written = _checked_by_the_write(
        access,
        lambda scope: (
            manage.put_while_running(scope, key, body.text, ttl=body.ttl, writer=writer, ti_id=claims.ti_id)
            if if_version is None
            else None
        ),
        lambda scope: manage.put(
            scope, key, body.text, ttl=body.ttl, if_version=if_version, writer=writer, by_running_try=True
        ),
    )
    return answer(StateWriteResponse, key=key, version=written.version)


def add_to_value(access: ScopeAccess, claims: TaskInstanceClaims, key: str, body: IncrementBody) -> Response:
    writer = writer_of(claims)
    with refused_as(Reason.INVALID_VALUE):  # not an integer stored, or the sum leaves 64 bits
        added = _checked_by_the_write(
            access,
            lambda scope: manage.increment_while_running(
                scope, key, body.by, ttl=body.ttl, writer=writer, ti_id=claims.ti_id
            ),
            lambda scope: manage.increment(
                scope, key, body.by, ttl=body.ttl, writer=writer, by_running_try=True
            ),
        )
    return answer(StateIncrementResponse, key=key, value=added.value)


def _checked_by_the_write(
    access: ScopeAccess, folded: Callable[[TaskScope], T | None], checked: Callable[[StateScope], T]
) -> T:
    """
    What *folded* does, the write checking in its own statement that the try still runs, once a
    request of the try has checked its task instance (whose scope never changes); when it cannot or
    wrote nothing, *checked* after the state API's own check, which says why (or finds the try
    running again).
    """
    known, done = access.known(), None
    if known is not None:
        with suppress(TryNotRunning):
            done = folded(known)
    return checked(access.for_writing()) if done is None else done
