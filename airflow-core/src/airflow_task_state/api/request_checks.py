"""
What every request of the state app must pass before a route sees it, run before any route's own
dependencies (Airflow's access checks included), and the bound on the bodies of routes that
answer anyone.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response, status
from fastapi.routing import APIRoute
from starlette.types import Message, Receive

from airflow_task_state.api.errors import refusal, unprocessable
from airflow_task_state.api.params import body_within
from airflow_task_state.protocol import PROOF_SCHEME, Reason

# The methods whose body routes read; GET and DELETE routes read none.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON = "application/json"
# Authorization schemes a browser never attaches by itself (it does Basic and Negotiate): a page
# can send them only through a preflight. The second is a task's first request (its proof).
_SET_BY_SCRIPTS_ONLY = frozenset({"bearer", PROOF_SCHEME.lower()})


async def json_declared(request: Request) -> None:
    """
    A POST, PUT or PATCH without a bearer token must declare ``Content-Type: application/json``,
    empty bodies included (415 ``invalid_request``): else a page of another origin could send it,
    without a CORS preflight, with the UI's cookie (docs/rest-api.md, "Requests a browser can be
    made to send").
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


async def plain_path_parameters(request: Request) -> None:
    """
    No path parameter holds a control character (422 ``invalid_request``): such a parameter names
    nothing, but a NUL in one made Airflow's own access check fail in PostgreSQL (500).
    """
    for name, value in request.path_params.items():
        char = next((char for char in str(value) if unicodedata.category(char) == "Cc"), None)
        if char is not None:
            raise unprocessable(
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
    A route whose body is refused (413 ``body_too_large``) past ``UNAUTHENTICATED_BODY_BYTES``, before
    more is read. In the handler, not a dependency: FastAPI reads a model body before any dependency.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            body = await body_within(
                request, UNAUTHENTICATED_BODY_BYTES, "handshake requests are a few hundred bytes"
            )
            # The body is read: the route gets a request that hands it over again (FastAPI's own way
            # to give a route a request of one's making: a custom APIRoute).
            return await handler(Request(request.scope, _handing_over(body, request.receive)))

        return bounded


def _handing_over(body: bytes, receive: Receive) -> Receive:
    """An ASGI ``receive`` that gives *body*, already read, then what *receive* gives (a disconnect)."""
    handed_over = False

    async def again() -> Message:
        nonlocal handed_over
        if handed_over:
            return await receive()
        handed_over = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
