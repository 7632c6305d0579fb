"""What listing a scope returns: its entries (key, value and who wrote them when), a page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .writes import StateWriter


@dataclass(frozen=True)
class StateEntry:
    """
    One stored key, its value and what the backend knows of its last write (``None``: not recorded,
    or for *updated_by_try* not a task try, for *expires_at* never, for *writer* task state).
    """

    key: str
    value: str
    updated_at: datetime | None = None
    updated_by_try: int | None = None
    version: int | None = None
    expires_at: datetime | None = None
    writer: StateWriter | None = None


@dataclass(frozen=True)
class StateEntryPage:
    """A page of a scope's entries, sorted by key, and how many keys match the prefix on all pages."""

    entries: list[StateEntry]
    total: int


def validate_listing(key_prefix: object, offset: object, limit: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless the arguments of ``entries()`` make sense."""
    if key_prefix is not None and not isinstance(key_prefix, str):
        raise TypeError(f"key_prefix must be a str or None, got {type(key_prefix).__name__}: {key_prefix!r}")
    if isinstance(key_prefix, str) and "\x00" in key_prefix:
        raise ValueError("key_prefix must not contain NUL (\\x00) characters")
    for name, number in (("offset", offset), ("limit", limit)):
        if number is None and name == "limit":
            continue
        if not isinstance(number, int) or isinstance(number, bool):
            raise TypeError(f"{name} must be an int, got {type(number).__name__}: {number!r}")
        if number < 0:
            raise ValueError(f"{name} must not be negative, got {number}")


def page_of_keys(
    keys: list[str], key_prefix: str | None, offset: int, limit: int | None
) -> tuple[list[str], int]:
    """One page of *keys* with *key_prefix*, and the total; by code point, whatever the collation."""
    matching = sorted(key for key in keys if key_prefix is None or key.startswith(key_prefix))
    end = None if limit is None else offset + limit
    return matching[offset:end], len(matching)
