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


# What the write routes document beside the operator API's common errors (OPERATOR_DOCUMENTED).
WRITE_DOCUMENTED: dict[int | str, dict[str, Any]] = {**CONFLICT_DOCUMENTED, **UNSUPPORTED_DOCUMENTED}
INCREMENT_DOCUMENTED: dict[int | str, dict[str, Any]] = UNSUPPORTED_DOCUMENTED
