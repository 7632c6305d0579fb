"""Task-facing values: any JSON document except null, stored as compact JSON text."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from airflow_shared.state import validate_value

from airflow_task_state.config import max_value_bytes
from airflow_task_state.large_values import check_fresh

__all__ = ["ValueTooLargeError", "decode", "encode", "max_value_bytes"]


class ValueTooLargeError(ValueError):
    """A value past the limit; ``text`` is its JSON, for the task's client to store as a large value."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


#: How deeply a value may nest: every reader of state (the APIs' responses included) handles that
#: much, and no real document comes near it.
MAX_DEPTH = 100


def encode(value: Any, limit: int | None = None) -> str:
    """*value* as JSON text, or ``ValueError``/``TypeError`` saying what is wrong (``None``, NaN...)."""
    if value is None:
        raise ValueError("state values cannot be None; to remove a key call delete()")
    _check_shape(value)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as error:
        if "Out of range float values" in str(error):
            raise ValueError(f"state values must be JSON; NaN and Infinity are not: {error}") from None
        raise ValueError(f"state value cannot be stored as JSON: {error}") from None
    except TypeError as error:
        raise TypeError(
            f"state values must be JSON-serialisable (dict, list, str, number, bool): {error}"
        ) from None
    validate_value(text)  # a lone surrogate survives json.dumps, but no store can keep it
    check_fresh(text)  # a large value's reference: only while its object cannot have been collected
    limit = max_value_bytes() if limit is None else limit
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValueTooLargeError(
            f"state value is {size} bytes as JSON; the limit is {limit} ([state] max_value_bytes)", text
        )
    return text


def _check_shape(value: Any) -> None:
    """
    Refuse what JSON would store as something else, or what readers could not read back: an object
    key that is not a string (``1`` would come back as ``"1"``, and ``{1: a, "1": b}`` lose ``a``),
    or nesting deeper than MAX_DEPTH.
    """
    pending: list[tuple[Any, int]] = [(value, 1)]
    items: Iterable[Any]
    while pending:
        container, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"state value nests more than {MAX_DEPTH} levels deep; flatten it")
        if isinstance(container, dict):
            for key in container:
                if not isinstance(key, str):
                    raise TypeError(
                        f"state values' object keys must be strings, got {key!r:.40} "
                        f"({type(key).__name__}): JSON keeps object keys as strings, so it would read "
                        "back as another key"
                    )
            items = container.values()
        elif isinstance(container, list | tuple):
            items = container
        else:
            continue
        pending.extend((item, depth + 1) for item in items if isinstance(item, dict | list | tuple))


def decode(text: str) -> Any:
    return json.loads(text)
