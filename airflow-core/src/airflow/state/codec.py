"""Task-facing values: any JSON document except null, stored as compact JSON text."""

from __future__ import annotations

import json
from typing import Any

from airflow.state.config import max_value_bytes
from airflow_shared.state import validate_value

__all__ = ["decode", "encode", "max_value_bytes"]


def encode(value: Any, limit: int | None = None) -> str:
    """*value* as JSON text, or ``ValueError``/``TypeError`` saying what is wrong (``None``, NaN...)."""
    if value is None:
        raise ValueError("state values cannot be None; to remove a key call delete()")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as error:
        raise ValueError(f"state values must be JSON; NaN and Infinity are not: {error}") from None
    except TypeError as error:
        raise TypeError(
            f"state values must be JSON-serialisable (dict, list, str, number, bool): {error}"
        ) from None
    validate_value(text)  # a lone surrogate survives json.dumps, but no store can keep it
    limit = max_value_bytes() if limit is None else limit
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValueError(
            f"state value is {size} bytes as JSON; the limit is {limit} ([state] max_value_bytes)"
        )
    return text


def decode(text: str) -> Any:
    return json.loads(text)
