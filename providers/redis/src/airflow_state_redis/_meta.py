"""
The metadata stored beside each value: ``"<micros>:<try>:<version>:<expires micros>[:<writer>]"``
(docs/redis.md, "Key layout"). The writer, asset state's only, is compact JSON and comes last because
JSON may hold ``:``. An older build wrote ``"<micros>:<try>"``; that, and anything unreadable, means
version 1 that never expires. The Lua side of this parsing is ``meta_of`` in :mod:`._scripts`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from airflow_shared.state import StateWriter, WriterKind

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_META = re.compile(
    rb"(?P<at>\d{1,20}):(?P<try>-?\d{1,20})?"
    rb"(?::(?P<version>\d{1,20}):(?P<expires>\d{1,20})?(?::(?P<writer>.*))?)?",
    re.DOTALL,
)


# What a read needs, parsed as ``meta_of`` in the Lua scripts parses it (same answers for any text).
_VERSION_AND_EXPIRY = re.compile(rb"\d+:-?\d*:(\d+):(\d*)(?::|\Z)")


def version_and_expiry(raw: bytes | None) -> tuple[int, int | None]:
    """``(version, expires epoch micros or None)`` of a metadata value, without building datetimes."""
    match = None if raw is None else _VERSION_AND_EXPIRY.match(raw)
    if match is None:
        return 1, None
    return int(match[1]), int(match[2]) if match[2] else None


@dataclass(frozen=True)
class Meta:
    updated_at: datetime | None = None
    updated_by_try: int | None = None
    version: int = 1
    expires_at: datetime | None = None
    writer: StateWriter | None = None

    def expired(self, now_micros: int) -> bool:
        return self.expires_at is not None and micros(self.expires_at) <= now_micros


def micros(moment: datetime) -> int:
    """Epoch microseconds of a timezone-aware datetime, exactly (no float rounding)."""
    return (moment - EPOCH) // timedelta(microseconds=1)


def _datetime(text: bytes | None) -> datetime | None:
    if text is None:
        return None
    try:
        return EPOCH + timedelta(microseconds=int(text))
    except OverflowError:  # past datetime.max
        return None


def encode_writer(writer: StateWriter) -> str:
    if writer.kind is not WriterKind.TASK:
        return json.dumps([writer.kind.value], separators=(",", ":"))
    parts = (writer.dag_id, writer.run_id, writer.task_id, writer.map_index, writer.try_number)
    return json.dumps([writer.kind.value, *parts], separators=(",", ":"), ensure_ascii=False)


def decode_writer(text: bytes) -> StateWriter | None:
    """The writer from its JSON, or ``None`` when it is not one this build understands."""
    try:
        parts = json.loads(text)
        kind = WriterKind(parts[0])
        if kind is not WriterKind.TASK:
            return StateWriter(kind)
        dag_id, run_id, task_id, map_index, try_number = parts[1:]
        # A writer stored before StateWriter checked its fields may be refused now: not known.
        return StateWriter(kind, dag_id, run_id, task_id, map_index, try_number)
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def parse_meta(raw: bytes | str | None, is_task: bool) -> Meta:
    """Read a metadata value; absent or garbled gives :class:`Meta`'s defaults (version 1)."""
    if raw is None:  # written by a build that predates the metadata
        return Meta()
    match = _META.fullmatch(raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace"))
    if match is None:
        return Meta()
    updated_at = _datetime(match["at"])
    if updated_at is None:
        return Meta()
    try_number = int(match["try"]) if match["try"] is not None and is_task else None
    if match["version"] is None:  # the older "<micros>:<try>"
        return Meta(updated_at, try_number)
    writer = decode_writer(match["writer"]) if match["writer"] is not None and not is_task else None
    return Meta(updated_at, try_number, int(match["version"]), _datetime(match["expires"]), writer)


def meta_parts(
    now_micros: int, try_number: int | None, expires_at: datetime | None, writer: StateWriter | None
) -> tuple[bytes, bytes]:
    """The metadata of a write, split around its version (which only the server knows)."""
    head = f"{now_micros}:{'' if try_number is None else try_number}:"
    # Clamped at the epoch: an expiry before 1970 is as past as one in 1970, and stays digits.
    tail = ":" + ("" if expires_at is None else str(max(0, micros(expires_at))))
    if writer is not None:
        tail += ":" + encode_writer(writer)
    return head.encode(), tail.encode("utf-8")
