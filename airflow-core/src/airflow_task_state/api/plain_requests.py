"""
A task's get or set of one key of its own state, the requests task code sends most, read by the
route itself when they are plain: a bearer credential, the task instance it names in the path, the
``key`` parameter alone. FastAPI's resolution of the route's dependencies (the credential, the key,
the body, the query parameters) costs more than the rest of such a request; any other request, a
refusal's included, goes through it as before and is answered exactly as the route documents.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import jwt
from airflow_shared.state import validate_key
from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute

from airflow_task_state.api.authentication import verified_claims
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.one_key import (
    read_on_event_loop,
    read_value,
    task_instance_access,
    write_on_event_loop,
    write_value,
)
from airflow_task_state.api.params import query_text, write_body
from airflow_task_state.protocol import KEY_PARAMETER

_KEY_FIELD = KEY_PARAMETER.encode()


def plain_request(request: Request) -> tuple[TaskInstanceClaims, str] | None:
    """
    The claims of a valid bearer credential for the task instance in the path, and the valid key of
    a query string that holds nothing else; ``None`` for any other request. Nothing is refused here:
    FastAPI's resolution of the route answers what is not plain, with the route's own refusals.
    """
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    field, _, value = request.scope["query_string"].partition(b"=")
    if scheme.lower() != "bearer" or field != _KEY_FIELD or b"&" in value:
        return None
    try:
        key = query_text(value)
        validate_key(key)
        claims = verified_claims(token)
    except (ValueError, TypeError, jwt.InvalidTokenError):  # UnicodeDecodeError is a ValueError
        return None
    if claims.ti_id != request.path_params.get("task_instance_id"):
        return None
    return claims, key


async def _read(request: Request, claims: TaskInstanceClaims, key: str) -> Response:
    if (answered := await read_on_event_loop(claims, key)) is not None:
        return answered
    return await run_in_threadpool(read_value, task_instance_access(claims, claims.ti_id), key)


async def _write(request: Request, claims: TaskInstanceClaims, key: str) -> Response:
    body = await write_body(request)
    if (answered := await write_on_event_loop(claims, key, body)) is not None:
        return answered
    return await run_in_threadpool(write_value, task_instance_access(claims, claims.ti_id), claims, key, body)


class PlainTaskValueRoute(APIRoute):
    """The task's get or set of one key (by its method), which serves its plain requests itself."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        resolved = super().get_route_handler()
        serve = _write if "PUT" in self.methods else _read

        async def plain_first(request: Request) -> Response:
            plain = plain_request(request)
            return await resolved(request) if plain is None else await serve(request, *plain)

        return plain_first
