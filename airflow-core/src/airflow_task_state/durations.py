"""Durations as people write them in configuration and on the command line: ``90s``, ``12h``, ``7d``."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_duration(text: str, *, bare_unit: str = "s") -> timedelta:
    """
    ``<number><unit>`` (a bare number is in *bare_unit*) as a timedelta; ``0`` is a zero timedelta,
    which callers read as "no expiry". ``ValueError`` saying what is accepted for anything else.
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write a number followed by s, m, h, d or w (e.g. 90m, 12h, "
            f"7d), or a bare number of {_UNITS[bare_unit]}"
        )
    number, unit = match.groups()
    try:
        return timedelta(**{_UNITS[unit or bare_unit]: float(number)})
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None
