"""A stored entry as the upgrade scripts write it down (JSON), the same on both sides of the upgrade."""

from __future__ import annotations

from typing import Any


def entry_record(entry: Any) -> dict[str, Any]:
    return {
        "key": entry.key,
        "value": entry.value,
        "version": entry.version,
        "updated_at": entry.updated_at.isoformat(),
        "expires_at": entry.expires_at.isoformat() if entry.expires_at else None,
        "updated_by_try": entry.updated_by_try,
        "writer": None if entry.writer is None else str(entry.writer),
    }
