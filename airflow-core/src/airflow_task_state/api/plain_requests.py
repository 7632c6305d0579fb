"""
A task's get or set of one key of its own state, the requests task code sends most, served in front
of the state app's routing when they are plain: a bearer credential, the task instance it names in
the path, the ``key`` parameter alone. The app's routing (a scan of its routes, its middleware) and
FastAPI's resolution of the route's dependencies (the credential, the key, the body, the query
parameters) cost more than the rest of such a request. A plain request gets the answer its route
would give, from the same functions, refusals through the app's own exception handlers; any other
request goes to the app as before and is answered exactly as the route documents.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jwt
from airflow_shared.state import validate_key
from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

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
from airflow_task_state.protocol import KEY_PARAMETER, TASK_PREFIX, VALUE

_KEY_FIELD = KEY_PARAMETER.encode()
# The path of a task's value, below the state app: /task-instances/<its id>/value.
_BEFORE_ID, _AFTER_ID = TASK_PREFIX.partition("{task_instance_id}")[::2]
_AFTER_ID += VALUE

# An exception handler of Starlette's: FastAPI's defaults and ours are coroutines.
Handler = Callable[[Request, Any], Response | Awaitable[Response]]


def plain_request(scope: Mapping[str, Any]) -> tuple[TaskInstanceClaims, str] | None:
    """
    The claims of a valid bearer credential for the task instance in the path of an HTTP get or set
    of its value, and the valid key of a query string that holds nothing else; ``None`` for any other
    request. Nothing is refused here: the app's routing answers what is not plain, with the route's
    own refusals.
    """
    if scope["method"] not in _SERVE:
        return None
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    if not (path.startswith(_BEFORE_ID) and path.endswith(_AFTER_ID)):
        return None
    task_instance_id = path[len(_BEFORE_ID) : -len(_AFTER_ID)]  # compared with the credential's below
    field, _, value = scope["query_string"].partition(b"=")
    if field != _KEY_FIELD or b"&" in value:
        return None
    # A scope's headers are lower-cased names; a plain request has one Authorization header.
    authorization = [header for name, header in scope["headers"] if name == b"authorization"]
    if len(authorization) != 1:
        return None
    scheme, _, token = authorization[0].decode("latin-1").partition(" ")
    if scheme.lower() != "bearer":
        return None
    try:
        key = query_text(value)
        validate_key(key)
        claims = verified_claims(token)
    except (ValueError, TypeError, jwt.InvalidTokenError):  # UnicodeDecodeError is a ValueError
        return None
    return (claims, key) if claims.ti_id == task_instance_id else None


async def _read(request: Request, claims: TaskInstanceClaims, key: str) -> Response:
    if (answered := await read_on_event_loop(claims, key)) is not None:
        return answered
    return await run_in_threadpool(read_value, task_instance_access(claims, claims.ti_id), key)


async def _write(request: Request, claims: TaskInstanceClaims, key: str) -> Response:
    body = await write_body(request)
    if (answered := await write_on_event_loop(claims, key, body)) is not None:
        return answered
    return await run_in_threadpool(write_value, task_instance_access(claims, claims.ti_id), claims, key, body)


_SERVE = {"GET": _read, "PUT": _write}


def handler_of(handlers: Mapping[Any, Handler], error: Exception) -> Handler | None:
    """The handler Starlette's exception middleware would give *error*: by status code, then by class."""
    if isinstance(error, HTTPException) and error.status_code in handlers:
        return handlers[error.status_code]
    return next((handlers[kind] for kind in type(error).__mro__ if kind in handlers), None)


class PlainTaskValues:
    """
    ASGI middleware of the state app, outermost but for Starlette's last resort against errors (a
    500): it serves a task's plain get or set of one key itself and passes every other request on.
    *handlers*: the app's exception handlers, FastAPI's defaults among them.
    """

    def __init__(self, app: Any, handlers: Mapping[Any, Handler]) -> None:
        self.app = app
        self.handlers = handlers

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:  # the credential's check too: a misconfigured API server answers so (503)
            plain = plain_request(scope)
            response = None if plain is None else await _SERVE[scope["method"]](request, *plain)
        except Exception as error:
            handler = handler_of(self.handlers, error)
            if handler is None:
                raise
            handled = handler(request, error)
            response = await handled if inspect.isawaitable(handled) else handled
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)
