"""
How the operator routes answer a write the backend refuses after validation passed: a stored value
an increment cannot add to, or a sum beyond 64 bits (422 ``invalid_value``; nothing was written).

A version conflict (409) and a capability the backend lacks (501) are answered app-wide by the
handlers of :mod:`airflow.state.api.errors`, for the task routes and these alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.state.api.errors import CONFLICT_DOCUMENTED, UNSUPPORTED_DOCUMENTED, unprocessable
from airflow.state.protocol import Reason


@contextmanager
def refusing_backend_errors() -> Iterator[None]:
    try:
        yield
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_VALUE, error) from None


# A body not declared JSON, sent without a bearer token: see airflow.state.api.request_checks.
_NOT_JSON: dict[int | str, dict[str, Any]] = {
    415: {
        "description": "Sent with the UI's cookie but without `Content-Type: application/json`, empty "
        "bodies included (`invalid_request`): pages of other origins can send such requests"
    }
}

# What the write routes document beside the operator API's common errors (OPERATOR_DOCUMENTED).
WRITE_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    **CONFLICT_DOCUMENTED,
    **UNSUPPORTED_DOCUMENTED,
    **_NOT_JSON,
}
INCREMENT_DOCUMENTED: dict[int | str, dict[str, Any]] = {**UNSUPPORTED_DOCUMENTED, **_NOT_JSON}
