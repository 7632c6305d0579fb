"""
How task code reaches the state API: an HTTP client that speaks for one task instance.

Every call is idempotent (PUT of a value, DELETE, GET), so connection errors and 5xx answers are
retried with backoff; anything else fails at once with a message that says what to check.
Under ``dag.test()`` / ``airflow dags test`` tasks run inside the test process, and the client
serves the same app in-process instead (no API server needed).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from functools import cache
from typing import Any
from urllib.parse import quote

import httpx
from airflow.configuration import conf
from airflow.state.api.app import URL_PREFIX
from airflow.state.api.models import MISSING_KEY_DETAIL
from airflow.state.tokens import TaskInstanceClaims, api_secret, mint

RETRIES = 3
BACKOFF_SECONDS = 0.5
TIMEOUT_SECONDS = 30.0


class TaskStateError(RuntimeError):
    """The state API could not be reached, or refused the call."""


def api_url() -> str:
    """``[state] api_url``, or the API server of ``[core] execution_api_server_url`` plus ``/state``."""
    configured = conf.get("state", "api_url", fallback="") or ""
    if configured:
        return configured.rstrip("/")
    execution = conf.get("core", "execution_api_server_url", fallback="") or ""
    if not execution:
        raise TaskStateError(
            "Cannot find the state API: set [state] api_url (e.g. http://api-server:8080/state) "
            "or [core] execution_api_server_url"
        )
    base = execution.rstrip("/")
    base = base[: -len("/execution")] if base.endswith("/execution") else base
    return base + URL_PREFIX


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

    return httpx.WSGITransport(app=ASGIMiddleware(create_app()))


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
            client = httpx.Client(base_url=base_url, transport=transport, timeout=TIMEOUT_SECONDS)
            _clients[key] = client
        return client


class StateClient:
    """The state API, as seen by one task instance."""

    def __init__(self, claims: TaskInstanceClaims) -> None:
        self.claims = claims
        self.in_process = _in_process()
        if self.in_process:
            # Client and server are this process: a per-process secret they share is enough.
            if not conf.get("state", "api_secret", fallback=""):
                conf.set("state", "api_secret", secrets.token_urlsafe(48))
            self.base_url = "http://in-process"
        else:
            self.base_url = api_url()

    # --- paths -----------------------------------------------------------------------------

    def task_path(self, key: str | None = None) -> str:
        path = f"/task-instances/{self.claims.ti_id}/keys"
        return path if key is None else f"{path}/{quote(key, safe='')}"

    @staticmethod
    def asset_path(key: str | None = None) -> str:
        return "/assets/keys" if key is None else f"/assets/keys/{quote(key, safe='')}"

    # --- transport -------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {mint(self.claims, api_secret())}",
            "Content-Type": "application/json",
        }

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        http = _sync_client(self.base_url, self.in_process)
        for attempt in range(RETRIES + 1):
            try:
                response = http.request(method, path, headers=self._headers(), **kwargs)
            except httpx.TransportError as error:
                if attempt == RETRIES:
                    raise self._unreachable(error) from error
            else:
                if response.status_code < 500 or attempt == RETRIES:
                    return self._checked(response)
            time.sleep(BACKOFF_SECONDS * 2**attempt)
        raise AssertionError("unreachable")

    def _unreachable(self, error: Exception) -> TaskStateError:
        return TaskStateError(
            f"Cannot reach the task state API at {self.base_url} ({error}); check [state] api_url "
            "(default: the API server of [core] execution_api_server_url) and that the API server runs"
        )

    @staticmethod
    def _checked(response: httpx.Response) -> httpx.Response:
        if response.status_code < 400:
            return response
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        if response.status_code == 404:
            if str(detail).startswith(MISSING_KEY_DETAIL):
                return response
            raise TaskStateError(
                f"task state API answered 404: {detail} (is [state] api_url {response.url} the state API?)"
            )
        if response.status_code == 422:
            raise ValueError(f"task state refused the request: {detail}")
        hint = (
            " (check that [state] api_secret is the same on this worker and the API server)"
            if response.status_code == 401
            else ""
        )
        raise TaskStateError(f"task state API answered {response.status_code}: {detail}{hint}")
