"""
The checks of calls on many keys, before any I/O. A batch is bounded so that one call stays one
statement (one pipeline, one HTTP request) of a size every store accepts.
"""

from __future__ import annotations

from collections.abc import Mapping

from .validation import validate_key, validate_value

#: The most keys one call takes; larger batches are split by the caller.
MAX_MANY_KEYS = 1000


def validate_batch_size(count: int, what: str) -> None:
    """Raise ``ValueError`` when a batch of *count* keys is larger than :data:`MAX_MANY_KEYS`."""
    if count > MAX_MANY_KEYS:
        raise ValueError(
            f"{what} takes at most {MAX_MANY_KEYS} keys per call, got {count}; split it into several calls"
        )


def validate_many_keys(keys: object, what: str = "get_many/delete_many") -> list[str]:
    """The keys of a ``get_many`` or ``delete_many``, each checked, without repeats, in their order."""
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise TypeError(f"{what} takes a list of keys, got {type(keys).__name__}: {keys!r:.60}")
    unique = list(dict.fromkeys(keys))  # type: ignore[call-overload]
    validate_batch_size(len(unique), what)
    for key in unique:
        validate_key(key)
    return unique


def validate_many_values(values: object, what: str = "set_many") -> dict[str, str]:
    """The key-value pairs of a ``set_many``, each key and value checked."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} takes a mapping of keys to values, got {type(values).__name__}")
    validate_batch_size(len(values), what)
    checked = dict(values)
    for key, value in checked.items():
        validate_key(key)
        try:
            validate_value(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{what}: the value of key {key!r:.60}: {error}") from None
    return checked
