"""
When a written key expires: a write's ``ttl`` is a ``timedelta``, :data:`NEVER`, or ``None`` for
the default, which is ``[state] default_task_retention`` for task state and never for asset state.
The task API, the operators' API and the CLI all apply it through :func:`expires_at_for`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeAlias, cast

from airflow_shared.state import BaseStateBackend, StateCapabilityError, StateScope, TaskScope

from airflow_task_state.config import default_task_retention
from airflow_task_state.durations import parse_duration
from airflow_task_state.protocol import NEVER_EXPIRES

log = logging.getLogger(__name__)
_warned_no_expiry: set[str] = set()

#: A ``ttl`` that makes a key never expire (the default retention is not applied).
NEVER = cast("Literal['never']", NEVER_EXPIRES)
#: What a write's ``ttl`` may be: how long the key lives, :data:`NEVER`, or ``None`` (the default).
Ttl: TypeAlias = "timedelta | Literal['never'] | None"

# Far enough for anyone, near enough that no database's timestamp type overflows.
LONGEST_TTL = timedelta(days=365 * 100)


def parse_ttl(text: str) -> timedelta | Literal["never"]:
    """
    A ``ttl`` as people type it: ``never``, or a duration (``90s``, ``12h``, ``7d``, ``2w``; a bare
    number is seconds), more than 0 and at most :data:`LONGEST_TTL`. ``ValueError`` says what is accepted.
    """
    return NEVER if text.strip().lower() == NEVER else _in_range(parse_duration(text, bare_unit="s"))


def expires_at_for(
    scope: StateScope, ttl: Ttl, state: BaseStateBackend, *, now: datetime | None = None
) -> datetime | None:
    """
    When a key written now with *ttl* expires (``None``: never). The default retention is not applied,
    with a warning once, on a backend without expiry; an explicit ttl there is a ``StateCapabilityError``.
    """
    if ttl == NEVER:
        return None
    if ttl is None:
        if not isinstance(scope, TaskScope):
            return None
        retention = default_task_retention()
        if retention is None:
            return None
        if not state.supports_expiry:
            name = type(state).__name__
            if name not in _warned_no_expiry:
                _warned_no_expiry.add(name)
                log.warning(
                    "%s does not support expiry: [state] default_task_retention is not applied to its "
                    "task state, which stays until its dag run is deleted",
                    name,
                )
            return None
        ttl = retention
    elif not isinstance(ttl, timedelta):
        raise TypeError(f"ttl must be a timedelta, {NEVER!r} or None, got {type(ttl).__name__}: {ttl!r}")
    elif not state.supports_expiry:
        raise StateCapabilityError(state, "expiry (ttl)")
    return (now or datetime.now(UTC)) + _in_range(ttl)


def _in_range(ttl: timedelta) -> timedelta:
    if ttl <= timedelta(0):
        raise ValueError(f"a ttl must be longer than 0, got {ttl}; for no expiry, say {NEVER!r}")
    if ttl > LONGEST_TTL:
        raise ValueError(
            f"a ttl must be at most {LONGEST_TTL.days} days, got {ttl}; for no expiry, say {NEVER!r}"
        )
    return ttl
