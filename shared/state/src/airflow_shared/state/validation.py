"""Checks every backend runs before touching storage, so bad input never reaches it."""

from __future__ import annotations

from .scopes import AssetScope, TaskScope

#: Longest key accepted; the metastore's key column is this wide.
MAX_KEY_LENGTH = 512


def validate_scope(scope: object) -> None:
    """Raise ``TypeError`` unless *scope* is a :class:`TaskScope` or :class:`AssetScope`."""
    if not isinstance(scope, (TaskScope, AssetScope)):
        raise TypeError(f"scope must be a TaskScope or an AssetScope, got {type(scope).__name__}: {scope!r}")


def _validate_storable(what: str, text: str) -> None:
    # Every store must keep the same strings: PostgreSQL text cannot hold NUL, and no database
    # (nor the HTTP API) can carry a lone surrogate, which has no UTF-8 encoding.
    if "\x00" in text:
        raise ValueError(f"state {what} must not contain NUL (\\x00) characters; encode binary data first")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"state {what} is not valid Unicode ({error.reason} at position {error.start}); "
            "fix the string or encode it first"
        ) from None


def validate_key(key: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless *key* is a storable string of 1 to 512 characters."""
    if not isinstance(key, str):
        raise TypeError(f"state key must be a str, got {type(key).__name__}: {key!r}")
    if not key:
        raise ValueError("state key must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"state key is {len(key)} characters long; the limit is {MAX_KEY_LENGTH}: {key[:40]!r}..."
        )
    _validate_storable("key", key)


def validate_value(value: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless *value* is a string every store keeps (not ``None``)."""
    if value is None:
        raise TypeError("state value must be a str, got None; to remove a key call delete()")
    if not isinstance(value, str):
        raise TypeError(
            f"state value must be a str, got {type(value).__name__}; serialise it first (e.g. json.dumps)"
        )
    _validate_storable("value", value)
