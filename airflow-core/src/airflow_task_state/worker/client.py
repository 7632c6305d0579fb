"""
How task code reaches the state API: an HTTP client that speaks for one task instance.

The first call of a task process proves which task instance it runs (see
:mod:`airflow_task_state.worker.handshake`) and gets a credential for that try, which later calls send
and renew. Connection errors and 5xx answers are retried as Airflow retries its Execution API calls
(the ``[workers] execution_api_retr*`` options), so a state call survives an API server restart;
an increment or a conditional write only when it surely was not applied (applied twice, a counter
counts twice, a conditional write conflicts with itself): it never reached the server, or the
server says its database never ran it. Otherwise ``StateOutcomeUnknownError`` says the outcome is
unknown, as it does for any request of which an attempt may have been applied. Other errors fail
at once, dispatched on the ``reason`` the server gives, never on message text.

Under ``dag.test()`` the client serves the same app in-process (no API server, no handshake).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from airflow_task_state import config
from airflow_task_state.config import RetryPolicy
from airflow_task_state.exceptions import (
    InvalidStateError,
    StateAccessDeniedError,
    StateConfigurationError,
    StateConflictError,
    StateOutcomeUnknownError,
    StateUnavailableError,
    StateUnsupportedError,
)
from airflow_task_state.protocol import (
    CREDENTIAL_EXPIRES_HEADER,
    CREDENTIAL_HEADER,
    CREDENTIAL_RENEWAL_PATH,
    CREDENTIALS_PATH,
    IF_VERSION_PARAMETER,
    KEY_PARAMETER,
    OUTCOME_UNKNOWN_FIELD,
    PROOF_SCHEME,
    Reason,
)
from airflow_task_state.worker.handshake import verifier_to_present, write_proof

__all__ = ["StateClient", "start_handshake"]

log = logging.getLogger(__name__)


def _in_process() -> bool:
    """True inside `dag.test()`, where the task runs in this very process with database access."""
    # Looked up, not imported: a process that has not loaded the task runner runs no task.
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    supervisor = sys.modules.get("airflow.sdk.execution_time.supervisor")
    comms = getattr(runner, "SUPERVISOR_COMMS", None)
    return supervisor is not None and isinstance(comms, supervisor.InProcessSupervisorComms)


@dataclass(frozen=True)
class InProcessApi:
    """
    The state API served inside the task's own process, under ``dag.test()``: set by the plugin,
    which wires both sides, so that the worker never imports the API server's code.
    """

    #: Builds an HTTP transport that hands requests to the state API's app in this process.
    transport: Callable[[], httpx.BaseTransport]
    #: A credential for the task instance, signed with a key only this process holds:
    #: ``{"credential": ..., "expires_in": ...}``.
    credential: Callable[[Any], dict[str, Any]]


in_process_api: InProcessApi | None = None


def _served_in_process() -> InProcessApi:
    if in_process_api is None:
        raise StateConfigurationError(
            "the task runs in-process (dag.test()) but the state plugin is not loaded: install "
            "airflow-task-state where the DAG is tested, so that Airflow loads its plugin"
        )
    return in_process_api


_clients_lock = threading.Lock()
_clients: dict[tuple[int, str, bool], httpx.Client] = {}


def _sync_client(base_url: str, in_process: bool) -> httpx.Client:
    """
    One pooled HTTP client per process and API, so a task calling in a loop reuses its connection;
    keyed by pid, so a forked child never shares its parent's sockets.
    """
    key = (os.getpid(), base_url, in_process)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = httpx.Client(
                base_url=base_url,
                transport=_served_in_process().transport() if in_process else None,
                timeout=config.request_timeout(),
                # Loading the CA bundle takes about 50 ms, which a plain-http API never uses: half
                # of a task process's first state call, measured when the handshake was first timed.
                verify=not base_url.startswith("http://"),
            )
        return client


@dataclass(frozen=True)
class _Credential:
    token: str
    renew_at: float  # time.monotonic() values
    expires_at: float


# Credentials by (pid, task instance id): one handshake per task process, shared by its threads;
# the lock also makes concurrent first calls wait for one handshake instead of starting several.
_credentials: dict[tuple[int, str], _Credential] = {}
_credentials_lock = threading.Lock()
# Stop using a credential this long before it expires: the request may wait in retries.
_EXPIRY_MARGIN_SECONDS = 60.0


def _unlock_in_child() -> None:
    # Task code forks (multiprocessing, executors): a child forked while another thread held a
    # lock would wait for it forever. What the locks guard is keyed by pid, so a child starts clean.
    global _clients_lock, _credentials_lock
    _clients_lock, _credentials_lock = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_unlock_in_child)


class StateClient:
    """The state API, as seen by one task instance."""

    def __init__(self, ti: Any) -> None:
        self.ti = ti
        self.ti_id = str(ti.id)
        self.in_process = _in_process()
        self.base_url = "http://in-process" if self.in_process else config.api_url()

    # --- transport -------------------------------------------------------------------------

    def request(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> httpx.Response:
        """
        Send one request as this task instance; return the answer (a 404 only for a missing key) or
        raise the error it stands for. Not *idempotent*: retried only if it never reached the server.
        """
        response = self._send_as_this_try(method, path, idempotent=idempotent, **kwargs)
        if response.status_code == 401:
            # Expired while waiting, or the server's key was rotated: prove identity again, once.
            with _credentials_lock:
                _credentials.pop(self._key, None)
            response = self._send_as_this_try(method, path, idempotent=idempotent, **kwargs)
        return _checked(response)

    def _send(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> httpx.Response:
        http = _sync_client(self.base_url, self.in_process)
        request = _request_for(http, method, self.base_url + path, **kwargs)
        retry = RetryPolicy.from_config()
        may_have_reached = False  # an attempt whose reply was lost: applied or not, no one knows
        for attempt in range(retry.retries + 1):
            last = attempt == retry.retries
            try:
                response = http.send(request)
            except httpx.TransportError as error:
                if not isinstance(error, _NEVER_SENT):
                    if not idempotent:
                        raise _outcome_unknown(method, path, error) from error
                    may_have_reached = True
                if last and may_have_reached:
                    raise _outcome_unknown(method, path, error, retried=True) from error
                if last:
                    raise StateUnavailableError(
                        f"Cannot reach the task state API at {self.base_url} ({error}); check [state] "
                        "api_url (default: from [core] execution_api_server_url or [api] base_url) and "
                        "that the API server runs"
                    ) from error
            else:
                if not _retryable(response):
                    return response
                if _may_have_applied(response):
                    if not idempotent:
                        raise _outcome_unknown(method, path, _answered(response))
                    may_have_reached = True
                if last and may_have_reached:
                    # An earlier attempt's reply was lost: what this one answers (a 503 while the
                    # database fails over) says nothing about whether that one was applied.
                    raise _outcome_unknown(method, path, _answered(response), retried=True)
                if last:
                    return response
            time.sleep(retry.wait(attempt))
        raise AssertionError("unreachable")

    # --- the credential ----------------------------------------------------------------------

    @property
    def _key(self) -> tuple[int, str]:
        return os.getpid(), self.ti_id

    def _send_as_this_try(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """
        Send a request with this process's credential; the first request of the process instead
        carries the try's proof, and the answer brings the credential along (one round trip).
        Concurrent first calls of a process wait for that one, then use its credential.
        """
        with _credentials_lock:
            held = self._fresh_credential()
            if held is None and self.in_process:
                held = _credentials[self._key] = self._new_credential()
            elif held is None:
                started = time.monotonic()
                response = self._send_proving(method, path, **kwargs)
                granted = response.headers.get(CREDENTIAL_HEADER)
                if granted:
                    expires_in = response.headers[CREDENTIAL_EXPIRES_HEADER]
                    _credentials[self._key] = _held(
                        {"credential": granted, "expires_in": expires_in}, started
                    )
                return response
        return self._send(method, path, headers=_bearer(held.token), **kwargs)

    def _fresh_credential(self) -> _Credential | None:
        """The credential held (call under the lock), renewed when due; None if none is or it expired."""
        held = _credentials.get(self._key)
        if held is None or time.monotonic() >= held.expires_at:
            return None
        if time.monotonic() >= held.renew_at:
            held = _credentials[self._key] = self._renewed(held)
        return held

    def _send_proving(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # The HTTP client first: made while the handshake's head start may still be writing the proof.
        _sync_client(self.base_url, self.in_process)
        return self._with_proof(
            lambda verifier: self._send(method, path, headers=_proving(self.ti_id, verifier), **kwargs)
        )

    def _with_proof(self, send: Callable[[str], httpx.Response]) -> httpx.Response:
        """The answer to *send* (verifier), sent once the try's proof is among the rendered fields."""
        response = send(verifier_to_present(self.ti))
        if response.status_code == 403 and _reason(response)[0] == Reason.PROOF_NOT_FOUND.value:
            # The proof was replaced since it was written (the task runner rewrites the rendered
            # fields after some tasks; a process forked before the try's verifier was drawn writes
            # one of its own): write it again, once. Refused at the door, the request did nothing.
            response = send(verifier_to_present(self.ti, rewrite=True))
        return response

    def hold_credential(self) -> None:
        """Get a credential for this process now, or renew the one held once half its life is gone."""
        with _credentials_lock:
            if self._fresh_credential() is None:
                _credentials[self._key] = self._new_credential()

    def _new_credential(self) -> _Credential:
        started = time.monotonic()
        if self.in_process:
            return _held(_served_in_process().credential(self.ti), started)
        answer = self._with_proof(
            lambda verifier: self._send(
                "POST", CREDENTIALS_PATH, json={"task_instance_id": self.ti_id, "verifier": verifier}
            )
        )
        return _held(_checked(answer).json(), started)

    def _renewed(self, held: _Credential) -> _Credential:
        if self.in_process:
            return self._new_credential()
        started = time.monotonic()
        answer = self._send("POST", CREDENTIAL_RENEWAL_PATH, headers=_bearer(held.token))
        if answer.status_code == 401:  # the server's key changed: prove identity again
            return self._new_credential()
        try:
            return _held(_checked(answer).json(), started)
        except StateAccessDeniedError:
            # The try has ended (code in a callback): what is left of the credential still reads.
            return _Credential(held.token, renew_at=held.expires_at, expires_at=held.expires_at)


def start_handshake(ti: Any, *, credential: bool = False) -> None:
    """
    Begin the handshake of *ti*'s task process in a thread as the try starts, so the first state
    call waits only for what is left of it. With *credential*, the proof is redeemed too: a try that
    clears its state on success needs one then, when an ended try gets none. A failure here is left
    for the first call to meet again, and to report.
    """
    client = StateClient(ti)
    if client.in_process:
        return

    def prepare() -> None:
        try:
            write_proof(ti)  # the first call makes the HTTP client meanwhile, if it comes first
            if credential:
                client.hold_credential()
        except Exception:
            log.debug("The early state handshake failed; the first state call will try again", exc_info=True)

    threading.Thread(target=prepare, name="state-handshake", daemon=True).start()


def _request_for(
    http: httpx.Client, method: str, url: str, *, params: dict[str, Any] | None = None, **kwargs: Any
) -> httpx.Request:
    """
    The request *http* would build, made directly: its own building merges the client's base URL,
    headers, cookies and parameters into each request, parsing the URL three times, which cost half
    the client's time of a state call when measured. Query parameters are encoded as httpx does.
    """
    if params:
        url += "?" + str(httpx.QueryParams(params))
    request = httpx.Request(method, url, extensions={"timeout": http.timeout.as_dict()}, **kwargs)
    request.headers = httpx.Headers({**http.headers, **request.headers})  # the client's defaults first
    return request


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _proving(ti_id: str, verifier: str) -> dict[str, str]:
    return {"Authorization": f"{PROOF_SCHEME} {ti_id}.{verifier}"}


def _held(granted: dict[str, Any], started: float) -> _Credential:
    lifetime = float(granted["expires_in"])
    return _Credential(
        granted["credential"],
        renew_at=started + lifetime / 2,
        expires_at=started + max(lifetime - _EXPIRY_MARGIN_SECONDS, lifetime / 2),
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


# Failures of a request that was never sent: retrying it cannot apply it twice.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _outcome_unknown(
    method: str, path: str, error: object, *, retried: bool = False
) -> StateOutcomeUnknownError:
    if retried:  # sent again (applying it twice is safe), but no attempt's reply came back
        return StateOutcomeUnknownError(
            f"{method} {path} to the task state API failed ({error}); an earlier attempt may have reached "
            "the server, so it may or may not have been applied; read the keys to find out"
        )
    return StateOutcomeUnknownError(
        f"{method} {path} to the task state API failed ({error}) after it may have reached the server: "
        "it may or may not have been applied, and it is not retried because applying it twice "
        "(an increment, a conditional write) would be wrong; read the key to find out"
    )


def _answered(response: httpx.Response) -> str:
    reason, message = _reason(response)
    return f"{response.status_code} {reason or ''}: {message}"


def _may_have_applied(response: httpx.Response) -> bool:
    """
    Whether a 5xx answer leaves open that the request was applied: only the state API's own
    ``database_unavailable`` says it was not, unless it says the database lost its reply too.
    """
    if _reason(response)[0] != Reason.DATABASE_UNAVAILABLE:
        return True  # a proxy's 502, or a server error in the middle of the request
    return response.json()["detail"].get(OUTCOME_UNKNOWN_FIELD) is True


def _retryable(response: httpx.Response) -> bool:
    # A server without its secret stays without it, and a backend without a capability stays
    # without it: retrying would only delay the clear error.
    final = (Reason.MISCONFIGURED.value, Reason.UNSUPPORTED.value)
    return response.status_code >= 500 and _reason(response)[0] not in final


# The error each reason is raised as; any other reason means the API is not usable now.
_RAISED_AS: dict[str, type[Exception]] = {
    reason: error
    for error in (StateAccessDeniedError, InvalidStateError, StateUnsupportedError, StateConfigurationError)
    for reason in error.reasons
}


def _checked(response: httpx.Response) -> httpx.Response:
    """*response* if it is a success or a missing key; otherwise the error its ``reason`` stands for."""
    if response.status_code < 400:
        return response
    reason, message = _reason(response)
    if reason == Reason.KEY_NOT_FOUND:
        return response
    if reason is None:
        raise StateUnavailableError(
            f"task state API answered {response.status_code} with no reason: {message} "
            f"(is [state] api_url right? {response.url} does not look like the state API)"
        )
    if reason == Reason.VERSION_CONFLICT:
        raise _conflict(response)
    described = f"task state API answered {response.status_code} ({reason}): {message}"
    if reason == Reason.INVALID_TOKEN:
        described += (
            " (a credential the API server does not accept even after a new handshake: "
            "do all API servers share [api_auth] jwt_secret, or [state] session_key?)"
        )
    raise _RAISED_AS.get(reason, StateUnavailableError)(described)


def _conflict(response: httpx.Response) -> StateConflictError:
    """The 409 of a conditional write, as the error task code catches: key, expected and stored version."""
    params = response.request.url.params
    try:
        stored = int(response.json()["detail"]["stored_version"])
        expected = int(params.get(IF_VERSION_PARAMETER, "0"))
    except (ValueError, KeyError, TypeError):
        stored, expected = -1, -1
    return StateConflictError(params.get(KEY_PARAMETER, ""), expected, stored)
