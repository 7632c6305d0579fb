"""
How task code reaches the state API: an HTTP client that speaks for one task instance.

Connection errors and 5xx answers are retried with the same settings as Airflow's own calls to
the Execution API (``[workers] execution_api_retries``, ``execution_api_retry_wait_min`` and
``execution_api_retry_wait_max``), so a state call survives whatever an API server restart or a
database failover Airflow's own task calls survive. That is safe because every operation is
idempotent: PUT of a value, DELETE, GET. An operation that is not (an increment, a
compare-and-set) must carry an idempotency key the server remembers, so that a retry of a request
that was applied but whose answer was lost returns the first outcome instead of applying it twice.
Anything else fails at once with an error that says what to check, dispatched on the ``reason``
the server gives, never on message text.

Under ``dag.test()`` / ``airflow dags test`` tasks run inside the test process, and the client
serves the same app in-process instead (no API server needed).
"""

from __future__ import annotations

import os
import threading
import time
from functools import cache
from typing import Any

import httpx
from airflow.state import config
from airflow.state.config import RetryPolicy
from airflow.state.exceptions import (
    InvalidStateError,
    StateAccessDeniedError,
    StateConfigurationError,
    StateUnavailableError,
)
from airflow.state.protocol import Reason
from airflow.state.tokens import TaskInstanceClaims, mint

__all__ = ["RetryPolicy", "StateClient"]


def _in_process() -> bool:
    """True inside `dag.test()`, where the task runs in this very process with database access."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


@cache
def _in_process_transport() -> httpx.BaseTransport:
    """The state app served in this process, through a WSGI bridge."""
    from a2wsgi import ASGIMiddleware
    from airflow.state.api.app import create_app

    # Both are a valid ASGI app and WSGI callable; FastAPI, a2wsgi and httpx each spell the
    # protocol types their own way, and mypy cannot see they agree.
    return httpx.WSGITransport(app=ASGIMiddleware(create_app()))  # type: ignore[arg-type]


_clients_lock = threading.Lock()
_clients: dict[tuple[int, str, bool], httpx.Client] = {}


def _sync_client(base_url: str, in_process: bool) -> httpx.Client:
    """
    One pooled HTTP client per process and API: a task that reads and writes state in a loop
    reuses its connection instead of opening one per call. Keyed by pid, so a forked child never
    shares its parent's sockets.
    """
    key = (os.getpid(), base_url, in_process)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            transport = _in_process_transport() if in_process else None
            client = httpx.Client(
                base_url=base_url,
                transport=transport,
                timeout=config.request_timeout(),
            )
            _clients[key] = client
        return client


class StateClient:
    """The state API, as seen by one task instance."""

    def __init__(self, claims: TaskInstanceClaims) -> None:
        self.claims = claims
        self.in_process = _in_process()
        if self.in_process:
            # Client and server are this process: a secret only it knows is enough (used when
            # [state] api_secret is not set); the global configuration is left alone.
            config.use_process_secret()
            self.base_url = "http://in-process"
        else:
            self.base_url = config.api_url()

    # --- transport -------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {mint(self.claims, config.api_secret())}",
            "Content-Type": "application/json",
        }

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """
        Send one request, retried as Airflow retries its Execution API calls; return the answer
        (a 404 only when the key is missing) or raise the error the answer stands for.
        """
        http = _sync_client(self.base_url, self.in_process)
        retry = RetryPolicy.from_config()
        for attempt in range(retry.retries + 1):
            last = attempt == retry.retries
            try:
                # A fresh token each attempt: a long wait must not outlive the token's lifetime.
                response = http.request(method, path, headers=self._headers(), **kwargs)
            except httpx.TransportError as error:
                if last:
                    raise self._unreachable(error) from error
            else:
                if not _retryable(response) or last:
                    return _checked(response)
            time.sleep(retry.wait(attempt))
        raise AssertionError("unreachable")

    def _unreachable(self, error: Exception) -> StateUnavailableError:
        return StateUnavailableError(
            f"Cannot reach the task state API at {self.base_url} ({error}); check [state] api_url "
            "(default: from [core] execution_api_server_url or [api] base_url) and that the API server runs"
        )


def _reason(response: httpx.Response) -> tuple[str | None, str]:
    """The ``reason`` and ``message`` of an error answer (``None`` when it is not the state API's)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None, response.text[:500]
    if isinstance(detail, dict) and "reason" in detail:
        return str(detail["reason"]), str(detail.get("message", ""))
    return None, str(detail)


def _retryable(response: httpx.Response) -> bool:
    # A server without its secret stays without it: retrying would only delay the clear error.
    return response.status_code >= 500 and _reason(response)[0] != Reason.MISCONFIGURED.value


# The reasons, each raised as one class; any other reason means the API is not usable now.
_ACCESS_DENIED = frozenset(r.value for r in (Reason.ASSET_NOT_DECLARED, Reason.FORBIDDEN, Reason.NOT_RUNNING))
_INVALID = frozenset(
    r.value for r in (Reason.INVALID_KEY, Reason.INVALID_VALUE, Reason.INVALID_REQUEST, Reason.BODY_TOO_LARGE)
)


def _checked(response: httpx.Response) -> httpx.Response:
    """*response* if it is a success or a missing key; otherwise the error its ``reason`` stands for."""
    if response.status_code < 400:
        return response
    reason, message = _reason(response)
    if reason == Reason.KEY_NOT_FOUND.value:
        return response
    if reason is None:
        raise StateUnavailableError(
            f"task state API answered {response.status_code} with no reason: {message} "
            f"(is [state] api_url right? {response.url} does not look like the state API)"
        )
    described = f"task state API answered {response.status_code} ({reason}): {message}"
    if reason in _ACCESS_DENIED:
        raise StateAccessDeniedError(described)
    if reason in _INVALID:
        raise InvalidStateError(described)
    if reason == Reason.MISCONFIGURED.value:
        raise StateConfigurationError(described)
    if reason == Reason.INVALID_TOKEN.value:
        raise StateUnavailableError(
            f"{described} (check that [state] api_secret is the same on this worker and the API server)"
        )
    raise StateUnavailableError(described)
