"""What a task may pass beside a value: a time to live, and the version a write expects."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, NamedTuple

from airflow_task_state.protocol import NEVER_EXPIRES


class Versioned(NamedTuple):
    """A stored value and its version: 1 when the key was created, one more on every write."""

    value: Any
    version: int


def ttl_field(ttl: Any) -> float | str | None:
    """
    *ttl* (as ``set`` takes it) as the API takes it: seconds, ``"never"``, or ``None`` for the default.
    Checked in the task, so a wrong ttl fails at once with what to pass, and no request is sent.
    """
    if ttl is None or ttl == NEVER_EXPIRES:
        return ttl
    if isinstance(ttl, str):
        raise ValueError(
            f"ttl {ttl!r}: the only text a ttl may be is airflow_task_state.NEVER_EXPIRES "
            f'("{NEVER_EXPIRES}"); '
            "give a timedelta or a number of seconds otherwise"
        )
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise TypeError(
            f"ttl must be a timedelta, a number of seconds, airflow_task_state.NEVER_EXPIRES or None, "
            f"not {type(ttl).__name__}: {ttl!r}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"ttl must be positive, got {ttl!r}; for a key that never expires pass "
            "airflow_task_state.NEVER_EXPIRES, and delete a key with delete()"
        )
    return seconds
