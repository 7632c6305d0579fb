"""
How the operator routes answer what the backend refuses on a write: a version conflict (409), a
capability the configured backend lacks (501), a stored value an increment cannot add to (422).

Raised as HTTP errors here, at the route, so the answer does not depend on which exception handlers
the app has registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.state.api.errors import refusal, unprocessable
from airflow.state.protocol import Reason
from airflow_shared.state import StateCapabilityError, StateConflictError
from fastapi import HTTPException, status


@contextmanager
def refusing_backend_errors() -> Iterator[None]:
    try:
        yield
    except StateConflictError as conflict:
        detail = {
            "reason": Reason.VERSION_CONFLICT.value,
            "message": str(conflict),
            "stored_version": conflict.stored,
        }
        raise HTTPException(status.HTTP_409_CONFLICT, detail) from None
    except StateCapabilityError as missing:
        raise refusal(status.HTTP_501_NOT_IMPLEMENTED, Reason.UNSUPPORTED, str(missing)) from None
    except (TypeError, ValueError) as error:
        # The stored value is not an integer, or the sum leaves 64 bits: nothing was written.
        raise unprocessable(Reason.INVALID_VALUE, error) from None


# What the write routes document beside the operator API's common errors (OPERATOR_DOCUMENTED).
_UNSUPPORTED = {
    "description": "The configured state backend cannot do this (`unsupported`): expiry, versions "
    "or increments; the message names which"
}
WRITE_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    409: {
        "description": "`if_version` did not match (`version_conflict`); the detail's `stored_version` "
        "is the version stored now (0: the key is absent)"
    },
    501: _UNSUPPORTED,
}
INCREMENT_DOCUMENTED: dict[int | str, dict[str, Any]] = {501: _UNSUPPORTED}
