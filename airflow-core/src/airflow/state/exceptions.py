"""
The errors this package raises on purpose, all under ``StateError``. Each also derives from the
built-in exception it used to be (``PermissionError``, ``RuntimeError``, ``ValueError``), so code
that caught those keeps working. Imports only the dependency-free ``airflow_shared.state``.
"""

from __future__ import annotations

from airflow_shared.state import StateConflictError as _BackendConflict

__all__ = [
    "InvalidStateError",
    "StateAccessDeniedError",
    "StateConfigurationError",
    "StateConflictError",
    "StateError",
    "StateUnavailableError",
    "StateUnsupportedError",
]


class StateError(Exception):
    """Root of every error ``airflow.state`` raises on purpose."""


class StateAccessDeniedError(StateError, PermissionError):
    """
    The task may not touch this state: an asset it does not declare (or writes to an inlet-only
    one: ``asset_not_declared``), another task instance's state (``forbidden``), a write by a try
    that is not running (``not_running``), a proof its supervisor did not write (``proof_not_found``).
    """


class StateUnavailableError(StateError, RuntimeError):
    """
    The state API cannot be used right now: unreachable, answering 5xx after the retries, or
    refusing the task's credential even after a new handshake (401: do all API servers derive the
    same key, from the same ``[api_auth] jwt_secret`` or ``[state] session_key``?).
    """


class StateConfigurationError(StateUnavailableError):
    """
    A deployment problem that retrying cannot fix: an API server with nothing to derive its
    credential key from (it answers 503 ``misconfigured``, which the client does not retry), or no
    way to find the state API URL.
    """


class InvalidStateError(StateError, ValueError):
    """
    The server refused a key or value (413/422: ``invalid_key``, ``invalid_value``,
    ``invalid_request``, ``body_too_large``). Checks made in the task before any request raise
    plain ``ValueError``/``TypeError`` instead.
    """


class StateConflictError(StateError, _BackendConflict):
    """
    A versioned write (``set(..., if_version=n)``) found another version stored (the server
    answered 409 ``version_conflict``): ``.stored`` is the version stored now (0: absent). It is
    also the backends' :class:`airflow_shared.state.StateConflictError`, so either name catches it.
    """


class StateUnsupportedError(StateError, NotImplementedError):
    """
    The configured state backend cannot do what the task asked (501 ``unsupported``): versions
    (``get_versioned``, ``if_version``, ``update``), expiry (``ttl``) or increments; the message
    names the backend and the capability. Backends raise ``airflow_shared.state.StateCapabilityError``.
    """
