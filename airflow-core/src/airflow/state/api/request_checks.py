"""
What every request of the state app must pass before a route sees it: checks that no route should
have to remember, run before any route's own dependencies (Airflow's access checks included).

- :func:`json_declared`: a request that a page of another origin could send through a browser,
  with the browser's cookie, never reaches a route that changes state.
- :func:`plain_path_parameters`: no control character in a DAG, run, task or asset id reaches
  Airflow's access checks or the database.
- :class:`SmallBodyRoute`: the body of an unauthenticated route is refused past a few KiB before
  it is read.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Coroutine
from typing import Any

from airflow.state.api.errors import refusal
from airflow.state.api.params import body_within
from airflow.state.protocol import PROOF_SCHEME, Reason
from fastapi import Request, Response, status
from fastapi.routing import APIRoute

# The methods whose body routes read; GET and DELETE routes read none.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON = "application/json"
# Authorization schemes a browser never attaches by itself (it does Basic and Negotiate): a page
# can send them only through a preflight. The second is a task's first request (its proof).
_SET_BY_SCRIPTS_ONLY = frozenset({"bearer", PROOF_SCHEME.lower()})


async def json_declared(request: Request) -> None:
    """
    A POST, PUT or PATCH must declare ``Content-Type: application/json``, unless it carries a
    bearer token: 415 ``invalid_request`` otherwise, empty bodies included.

    The operators' routes accept the UI's ``_token`` cookie, which browsers attach to requests
    other pages make. Of those, a "simple" request (a POST whose type is text/plain, a form's or
    none) needs no CORS preflight, so no consent of the API server: a page of another origin can
    send one, and routes read a body as JSON whatever its declared type. A JSON content type or a
    bearer token makes a request non-simple. Only ``Bearer`` counts: a browser attaches Basic
    (or Negotiate) credentials by itself, as it does a cookie.
    """
    if request.method not in _BODY_METHODS:
        return
    scheme = request.headers.get("authorization", "").partition(" ")[0]
    if scheme.lower() in _SET_BY_SCRIPTS_ONLY:
        return
    declared = request.headers.get("content-type")
    if declared is not None and declared.partition(";")[0].strip().lower() == JSON:
        return
    raise refusal(
        status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        Reason.INVALID_REQUEST,
        f"a {request.method} must send its body as JSON, with 'Content-Type: {JSON}' (got "
        f"{'no Content-Type' if declared is None else repr(declared[:60])}); an empty body needs it too. "
        "Requests with an 'Authorization: Bearer <token>' header are exempt",
    )


def _control_character(text: str) -> str | None:
    return next((char for char in text if unicodedata.category(char) == "Cc"), None)


async def plain_path_parameters(request: Request) -> None:
    """
    No path parameter holds a control character: 422 ``invalid_request``. (State keys are never in
    the path: they are the ``key`` query parameter, checked as keys.)

    Airflow's DAG, run and task ids hold none, and asset and task instance ids are numbers and
    UUIDs, so such a parameter names nothing; but a NUL in one made Airflow's own access check fail
    in PostgreSQL (500).
    """
    for name, value in request.path_params.items():
        char = _control_character(value) if isinstance(value, str) else None
        if char is not None:
            raise refusal(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                Reason.INVALID_REQUEST,
                f"path parameter {name} holds a control character (U+{ord(char):04X}); no DAG, run, "
                "task, task instance or asset id holds one: check the URL",
            )


# A handshake request is a task instance id and a verifier of at most 256 characters, some 350
# bytes: 4 KiB leaves room to spare. These routes answer anyone, so without a bound any client could
# make the API server hold a body of any size.
UNAUTHENTICATED_BODY_BYTES = 4096


class SmallBodyRoute(APIRoute):
    """
    A route whose body is refused (413 ``body_too_large``) past ``UNAUTHENTICATED_BODY_BYTES``,
    declared or streamed, before more than that is read: for routes that answer anyone.

    The bound runs in the route's handler, not in a dependency: FastAPI reads a body declared as a
    model before it runs any dependency.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            body = await body_within(
                request, UNAUTHENTICATED_BODY_BYTES, "handshake requests are a few hundred bytes"
            )
            # Starlette's own cache of the body, where FastAPI reads it from.
            request._body = body
            return await handler(request)

        return bounded
