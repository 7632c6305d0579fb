"""How the state API refuses a request: a status code and a body with a reason and a message."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from airflow.api_fastapi.compat import HTTP_422_UNPROCESSABLE_CONTENT
from airflow_shared.state import StateCapabilityError, StateConflictError
from fastapi import HTTPException, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_task_state.airflow_db.engine import StatementOutcomeUnknownError, is_unavailable
from airflow_task_state.exceptions import StateConfigurationError
from airflow_task_state.manage import NotFound
from airflow_task_state.protocol import OUTCOME_UNKNOWN_FIELD, Reason


def refusal(code: int, reason: Reason, message: str, headers: dict[str, str] | None = None) -> HTTPException:
    """
    An error whose body is ``{"detail": {"reason": ..., "message": ...}}``, the shape of Airflow's
    Execution API errors: clients dispatch on ``reason``, people read ``message``.
    """
    return HTTPException(code, {"reason": reason.value, "message": message}, headers)


def unauthorized(message: str, reason: Reason = Reason.INVALID_TOKEN) -> HTTPException:
    return refusal(status.HTTP_401_UNAUTHORIZED, reason, message, {"WWW-Authenticate": "Bearer"})


def forbidden(message: str, reason: Reason = Reason.FORBIDDEN) -> HTTPException:
    return refusal(status.HTTP_403_FORBIDDEN, reason, message)


def unprocessable(reason: Reason, error: Exception | str) -> HTTPException:
    return refusal(HTTP_422_UNPROCESSABLE_CONTENT, reason, str(error))


@contextmanager
def refused_as(reason: Reason, context: str = "") -> Iterator[None]:
    """A ``TypeError`` or ``ValueError`` raised within answers 422 *reason*, its message after *context*."""
    try:
        yield
    except (TypeError, ValueError) as error:
        raise unprocessable(reason, f"{context}{error}") from None


def documented(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of routes that can answer these codes, for the OpenAPI schema."""
    return {code: {"description": text} for code, text in descriptions.items()}


_INVALID_OR_UNAVAILABLE = {
    422: "Invalid key, value or request (`invalid_key`, `invalid_value`, `invalid_request`)",
    503: "Metadata database unreachable, or server misconfigured; retry later",
}
DOCUMENTED = documented(
    {
        401: "Missing, invalid or expired credential (reason `invalid_token`)",
        403: "The credential's task instance may not do this "
        "(`forbidden`, `not_running`, `asset_not_declared`)",
        413: "Request body larger than the value limit allows (`body_too_large`)",
        **_INVALID_OR_UNAVAILABLE,
    }
)
# What a versioned write (`if_version`) or an operation the configured backend lacks answers: merge
# into the `responses=` of the routes that can give them (the task routes and the operator API's).
CONFLICT_DOCUMENTED = documented(
    {
        409: "The key is not at the version `if_version` names (`version_conflict`); "
        "`detail.stored_version` is the version stored now (0: absent). Read it again and retry"
    }
)
UNSUPPORTED_DOCUMENTED = documented(
    {
        501: "The configured state backend does not support this (`unsupported`): versions, expiry "
        "(`ttl`) or increments"
    }
)
# The same for the operators' REST API (/api/v1), authenticated by Airflow's auth manager.
OPERATOR_DOCUMENTED = documented(
    {
        401: "No Airflow token, or an expired one (reason `unauthenticated`)",
        403: "Invalid token, or the user lacks the permission the message names (`forbidden`)",
        404: "No such dag run, task instance, asset or key (`dag_run_not_found`, "
        "`task_instance_not_found`, `asset_not_found`, `key_not_found`)",
        **_INVALID_OR_UNAVAILABLE,
    }
)
# A body not declared JSON, sent without a bearer token: see airflow_task_state.api.request_checks.
_NOT_JSON = documented(
    {
        415: "Sent with the UI's cookie but without `Content-Type: application/json`, empty bodies "
        "included (`invalid_request`): pages of other origins can send such requests"
    }
)
# What the operator API's write routes document beside OPERATOR_DOCUMENTED.
WRITE_DOCUMENTED = {**CONFLICT_DOCUMENTED, **UNSUPPORTED_DOCUMENTED, **_NOT_JSON}
INCREMENT_DOCUMENTED = {**UNSUPPORTED_DOCUMENTED, **_NOT_JSON}


def _answer(code: int, reason: Reason, message: str, **more: Any) -> JSONResponse:
    """An exception handler's answer, in the shape of :func:`refusal`."""
    body = {"detail": {"reason": reason.value, "message": message, **more}}
    headers = {"Retry-After": "1"} if reason is Reason.DATABASE_UNAVAILABLE else None
    return JSONResponse(jsonable_encoder(body), status_code=code, headers=headers)


# The app's exception handlers (see EXCEPTION_HANDLERS): any route, the operator API's included,
# lets these errors propagate.


async def not_found(request: Request, error: Exception) -> JSONResponse:
    """What an operator named (a dag run, task instance, asset or key) does not exist."""
    assert isinstance(error, NotFound)
    return _answer(status.HTTP_404_NOT_FOUND, error.reason, error.message)


async def validation_error(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's own request validation errors (e.g. no ``key`` parameter), in the same shape."""
    assert isinstance(error, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()
    )
    return _answer(HTTP_422_UNPROCESSABLE_CONTENT, Reason.INVALID_REQUEST, problems)


async def database_unavailable(request: Request, error: Exception) -> JSONResponse:
    """
    A metadata database that cannot be reached (restarting, failing over) answers 503, which task
    clients retry; any other database error is a bug and stays a 500.
    """
    if not is_unavailable(error):
        raise error
    if isinstance(error, StatementOutcomeUnknownError):
        # Still 503: the database is what failed. The write may have been applied: the client must
        # not take a later attempt's answer for this one's (it says so if none is answered).
        return _answer(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            Reason.DATABASE_UNAVAILABLE,
            str(error),
            **{OUTCOME_UNKNOWN_FIELD: True},
        )
    message = f"the metadata database cannot be reached ({type(error).__name__}); retry later"
    return _answer(status.HTTP_503_SERVICE_UNAVAILABLE, Reason.DATABASE_UNAVAILABLE, message)


async def misconfigured(request: Request, error: Exception) -> JSONResponse:
    """A deployment problem on the API server, which clients do not retry: the message says what to set."""
    return _answer(status.HTTP_503_SERVICE_UNAVAILABLE, Reason.MISCONFIGURED, f"API server: {error}")


async def version_conflict(request: Request, error: Exception) -> JSONResponse:
    """A lost ``if_version`` write, with the version stored (0: absent): no second read needed."""
    assert isinstance(error, StateConflictError)
    return _answer(status.HTTP_409_CONFLICT, Reason.VERSION_CONFLICT, str(error), stored_version=error.stored)


async def unsupported(request: Request, error: Exception) -> JSONResponse:
    """The configured backend lacks what the request needs; its message names the capability."""
    return _answer(status.HTTP_501_NOT_IMPLEMENTED, Reason.UNSUPPORTED, str(error))


async def no_route(request: Request, error: Exception) -> Response:
    """
    A path no route takes, or a method its route does not: Starlette's bare ``{"detail": "Not
    Found"}`` in the shape of every refusal, saying where keys go. A route's own 404 (an
    ``HTTPException`` carrying a reason) passes as it is.
    """
    assert isinstance(error, StarletteHTTPException)
    if isinstance(error.detail, dict):
        return await http_exception_handler(request, error)
    what = f"{request.method} {request.url.path}"
    if error.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        message = f"{what}: this path does not take {request.method}"
    else:
        message = f"{what}: no such path"
    message += " (keys go in the query string: .../stateEntry?key=<key>, .../stateIncrement?key=<key>)"
    body = {"detail": {"reason": Reason.INVALID_REQUEST.value, "message": message}}
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)  # 405 keeps Allow


EXCEPTION_HANDLERS: dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]] = {
    status.HTTP_404_NOT_FOUND: no_route,
    status.HTTP_405_METHOD_NOT_ALLOWED: no_route,
    RequestValidationError: validation_error,
    DBAPIError: database_unavailable,
    StateConfigurationError: misconfigured,
    NotFound: not_found,
    StateConflictError: version_conflict,
    StateCapabilityError: unsupported,
}
