"""
The errors this package raises on purpose, all under ``StateError``. Each also derives from the
built-in exception it used to be (``PermissionError``, ``RuntimeError``, ``ValueError``), so code
that caught those keeps working. Imports only the dependency-free ``airflow_shared.state``.
"""

from __future__ import annotations

from airflow_shared.state import StateConflictError as _BackendConflict

from airflow_task_state.protocol import Reason

__all__ = [
    "InvalidStateError",
    "LargeValueCorruptedError",
    "LargeValueError",
    "StateAccessDeniedError",
    "StateConfigurationError",
    "StateConflictError",
    "StateError",
    "StateOutcomeUnknownError",
    "StateUnavailableError",
    "StateUnsupportedError",
]


class StateError(Exception):
    """Root of every error ``airflow_task_state`` raises on purpose."""

    #: The ``reason`` of the state API's answers that the task's client raises as this error.
    reasons: tuple[Reason, ...] = ()


class StateAccessDeniedError(StateError, PermissionError):
    """
    The task may not touch this state: an asset it does not declare (or writes to an inlet-only
    one), another task instance's state, a write by a try that is not running, a handshake whose
    proof its supervisor did not write.
    """

    reasons = (Reason.ASSET_NOT_DECLARED, Reason.FORBIDDEN, Reason.NOT_RUNNING, Reason.PROOF_NOT_FOUND)


class StateUnavailableError(StateError, RuntimeError):
    """
    The state API cannot be used right now: unreachable, answering 5xx after the retries, or
    refusing the task's credential even after a new handshake (401: do all API servers derive the
    same key, from the same ``[api_auth] jwt_secret`` or ``[state] session_key``?).
    """


class StateOutcomeUnknownError(StateUnavailableError):
    """
    A write failed after it may have reached the API server (its reply was lost): it may or may not
    have been applied. A write that could be applied twice (an increment, a conditional write) is
    not sent again; one that cannot (a staged commit) was, and the server stayed out of reach.
    """


class StateConfigurationError(StateUnavailableError):
    """
    A deployment problem that retrying cannot fix: an API server with nothing to derive its
    credential key from (the client does not retry that answer), or no way to find the API's URL.
    """

    reasons = (Reason.MISCONFIGURED,)


class InvalidStateError(StateError, ValueError):
    """
    The server refused a key or value (413/422). Checks made in the task before any request raise
    plain ``ValueError``/``TypeError`` instead.
    """

    reasons = (Reason.INVALID_KEY, Reason.INVALID_VALUE, Reason.INVALID_REQUEST, Reason.BODY_TOO_LARGE)


class StateConflictError(StateError, _BackendConflict):
    """
    A versioned write (``set(..., if_version=n)``) found another version stored (the server
    answered 409): ``.stored`` is the version stored now (0: absent). It is
    also the backends' :class:`airflow_shared.state.StateConflictError`, so either name catches it.
    """


class StateUnsupportedError(StateError, NotImplementedError):
    """
    The configured state backend cannot do what the task asked (501): versions (``get_versioned``,
    ``if_version``, ``update``), expiry (``ttl``) or increments; the message names the backend and
    the capability. Backends themselves raise ``airflow_shared.state.StateCapabilityError``.
    """

    reasons = (Reason.UNSUPPORTED,)


class LargeValueError(StateError, ValueError):
    """
    A large value's reference that cannot be followed: malformed, naming an object outside
    ``[state] object_storage_path``, or (when stored) too old to be safe from ``airflow state clean``.
    """


class LargeValueCorruptedError(LargeValueError):
    """A large value's object is missing, or does not read back as the size and digest recorded say."""


class TryNotRunning(LookupError):
    """
    Internal, not raised to task code: a write by a try that checks in its own statement that the
    try runs (``write_while_running``) wrote nothing; the state API's full check then says why.
    """
