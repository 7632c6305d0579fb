"""
Large values: what the store keeps for a value that lives in object storage, a **reference**, and
the one rule that keeps ``airflow state clean`` from removing an object a reference may still name.

A reference is an ordinary JSON value, a one-key object, so every feature that carries a value
carries it unchanged (versions, batches, expiry, staged writes, export, Airflow 3.3's own store)::

    {"$airflow_task_state.large_value": {"format": 1, "kind": "json", "path": "s3://...",
     "size": 1073741824, "blake3": "...", "started_at": "2026-12-03T19:00:00.000000+00:00"}}

The digest is BLAKE3 (256 bits, hex), cryptographic like sha256 and about 2.5x faster on one core,
which a 1 GiB checkpoint's read and write are bound by on local disk. References written before it
carry ``sha256`` in its place; they read and verify as they did, and are never rewritten.

Task code cannot store that shape as a value of its own (the task's client refuses it), so a value
of that shape is always a reference. ``path`` is a fresh random name under ``[state]
object_storage_path``, never derived from keys or runs: no two writes share an object.

The collection rule (docs/large-values.md proves it): an object is collected only when no live
reference names it and it was last modified more than ``[state] object_grace_period`` ago; a
reference is accepted by every write path (:func:`check_fresh`, called by the codec) only within
half that period of ``started_at``, taken before the object's first byte was written. So a
reference accepted at all was committed before the collector's listing could have picked its object.

Imports only the standard library and the configuration.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_task_state import config
from airflow_task_state.exceptions import LargeValueError

#: The one key of a reference's JSON object.
MARKER = "$airflow_task_state.large_value"
#: How every reference's JSON text starts (the codec writes compact JSON, keys in order).
TEXT_PREFIX = '{"' + MARKER + '":'
FORMAT = 1
#: What the object holds: a JSON document (``set``), or bytes (``set_file``, ``set_bytes``).
KINDS = ("json", "bytes")
#: An object's name: 32 hex digits, from ``uuid4``.
NAME = re.compile(r"[0-9a-f]{32}")
#: The digests a reference may carry, by field name; new objects get the first.
ALGORITHMS = ("blake3", "sha256")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_COMMON_FIELDS = {"format", "kind", "path", "size", "started_at"}


@dataclass(frozen=True)
class Reference:
    """Where a large value lives and what it must read back as."""

    kind: str
    path: str
    size: int
    #: Hex digest of the object's bytes, by :attr:`algorithm` (one of :data:`ALGORITHMS`).
    digest: str
    started_at: datetime
    algorithm: str = ALGORITHMS[0]

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def as_value(self) -> dict[str, Any]:
        return {
            MARKER: {
                "format": FORMAT,
                "kind": self.kind,
                "path": self.path,
                "size": self.size,
                self.algorithm: self.digest,
                "started_at": self.started_at.isoformat(),
            }
        }


def is_reference(value: Any) -> bool:
    """Whether *value* (decoded JSON) has the reserved shape, a one-key object; cheap for every read."""
    return type(value) is dict and len(value) == 1 and MARKER in value


def parse(value: Any) -> Reference:
    """The :class:`Reference` *value* holds, or ``LargeValueError`` saying what is wrong with it."""
    fields = value.get(MARKER) if isinstance(value, dict) and len(value) == 1 else None
    algorithm = _algorithm_of(fields) if isinstance(fields, dict) else None
    if not isinstance(fields, dict) or algorithm is None or fields["format"] != FORMAT:
        raise LargeValueError(
            f"not a large value's reference of format {FORMAT}: {str(value)[:200]}; a value of the shape "
            f'{{"{MARKER}": ...}} is reserved for references to objects in [state] object_storage_path'
        )
    path, size, digest, kind = fields["path"], fields["size"], fields[algorithm], fields["kind"]
    try:
        started_at = datetime.fromisoformat(fields["started_at"])
    except (TypeError, ValueError):
        started_at = None
    if (
        kind not in KINDS
        or not isinstance(path, str)
        or not NAME.fullmatch(path.rsplit("/", 1)[-1])
        or type(size) is not int
        or size < 0
        or not isinstance(digest, str)
        or not _HEX_DIGEST.fullmatch(digest)
        or started_at is None
        or started_at.tzinfo is None
    ):
        raise LargeValueError(f"malformed large value reference: {str(fields)[:300]}")
    return Reference(kind, path, size, digest, started_at, algorithm)


def _algorithm_of(fields: dict[str, Any]) -> str | None:
    """The digest field of *fields* when they are exactly a reference's, with one digest."""
    extra = set(fields) - _COMMON_FIELDS
    if len(extra) != 1 or len(fields) != len(_COMMON_FIELDS) + 1:
        return None
    (algorithm,) = extra
    return algorithm if algorithm in ALGORITHMS else None


def commit_window() -> timedelta:
    """How long after its object's upload started a reference may still be written: half the grace."""
    return config.object_grace_period() / 2


def check_fresh(text: str) -> None:
    """
    Refuse (``ValueError``) to store *text* if it is a reference older than :func:`commit_window`:
    its object may be collected already, and the reference would dangle. Every write of a value
    passes here (the codec calls it); a text that is not a reference costs one ``startswith``.
    """
    if not text.startswith(TEXT_PREFIX):
        return
    value = json.loads(text)
    if not is_reference(value):  # an object whose first key is the marker, among others: a value
        return
    reference = parse(value)
    age, window = datetime.now(UTC) - reference.started_at, commit_window()
    if age < -window / 4:  # a writer's clock far ahead would stretch its window past the rule's
        raise LargeValueError(
            f"large value reference to {reference.path} says its upload started at "
            f"{reference.started_at.isoformat()}, {-age} from now: the worker's clock is wrong; fix it"
        )
    if age > window:
        raise LargeValueError(
            f"large value reference to {reference.path} was started {age} ago, longer than the commit "
            f"window of {commit_window()} (half of [state] object_grace_period): its object may have "
            "been collected by `airflow state clean`; write the value again (`airflow state import` "
            "writes a reference with a fresh copy of its object)"
        )
