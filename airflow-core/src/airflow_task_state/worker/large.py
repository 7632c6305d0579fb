"""
Large values as task code sees them: a value past ``[state] max_value_bytes`` is written to object
storage first and its reference stored in its place; a reference read back is replaced by the value,
checked. Files and bytes always go to object storage, streamed. Only the task's client does this:
the store, the APIs and the operators' surfaces see the reference (see :mod:`..large_values`).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any, BinaryIO

from airflow_task_state import codec, large_values, object_storage

#: What a reference takes in a request at most: sizing a staged commit before anything is uploaded.
LONGEST_REFERENCE_TEXT = 1024


def encode(value: Any, what: str, *, upload: bool = True) -> str:
    """
    *value* as the text to store: its JSON, or past ``max_value_bytes`` (with object storage
    configured) the reference to a new object holding that JSON; not *upload*: the JSON of any size.
    """
    if large_values.is_reference(value):
        raise ValueError(
            f"{what}: a value of the shape {{{large_values.MARKER!r}: ...}} is reserved for references to "
            "large values; wrap it in another object"
        )
    try:
        return codec.encode(value)
    except codec.ValueTooLargeError as too_large:
        if not object_storage.configured():
            raise ValueError(
                f"{too_large}; set [state] object_storage_path to store larger values in object storage"
            ) from None
        return offload(too_large.text) if upload else too_large.text


def offload(text: str) -> str:
    """Write JSON *text* to a new object; the reference's text."""
    return _reference_text(object_storage.write(_chunks(text.encode()), "json"))


def needs_fresh_copy(text: str) -> bool:
    """
    Whether JSON *text* is a reference (a staged file's) whose upload started more than half the
    commit window ago: sent now, it could be refused as stale (``large_values.check_fresh``).
    """
    if not text.startswith(large_values.TEXT_PREFIX):
        return False
    reference = large_values.parse(json.loads(text))
    return datetime.now(UTC) - reference.started_at > large_values.commit_window() / 2


def fresh_copy(text: str) -> str:
    """The reference text of a new object holding what reference *text* names (read and checked)."""
    return _reference_text(object_storage.copy(large_values.parse(json.loads(text))))


def is_large(text: str) -> bool:
    """Whether JSON *text* (a staged value) is past ``max_value_bytes`` and will be offloaded."""
    return len(text.encode()) > codec.max_value_bytes()


def _chunks(data: bytes) -> list[bytes]:
    view = memoryview(data)
    step = object_storage.CHUNK_BYTES
    return [bytes(view[start : start + step]) for start in range(0, len(data), step)] or [b""]


def _reference_text(reference: large_values.Reference) -> str:
    return codec.encode(reference.as_value())


def load(value: Any, key: str, what: str) -> Any:
    """*value* as read, with a large value's reference replaced by the value it names (checked)."""
    if not large_values.is_reference(value):
        return value
    reference = large_values.parse(value)
    if reference.kind != "json":
        raise TypeError(
            f"{what}({key!r:.60}) holds {reference.size} bytes stored with set_file() or set_bytes(); "
            "read them with get_file() or get_bytes()"
        )
    return codec.decode(object_storage.read_all(reference).decode())


def store_file(source: str | os.PathLike[str] | BinaryIO | bytes) -> str:
    """Stream *source* (a local path, a readable binary file object, or bytes) to a new object."""
    if isinstance(source, bytes | bytearray | memoryview):
        reference = object_storage.write(_chunks(bytes(source)), "bytes")
    elif isinstance(source, str | os.PathLike):
        if not os.path.isfile(source):
            raise FileNotFoundError(f"set_file: no file at {os.fspath(source)!r}")
        reference = object_storage.write_file(source)
    elif hasattr(source, "read"):
        reference = object_storage.write(object_storage.chunks_of(source), "bytes")
    else:
        raise TypeError(
            f"set_file takes a local file's path or a binary file object open for reading, not "
            f"{type(source).__name__}"
        )
    return _reference_text(reference)


def file_reference(value: Any, key: str, what: str) -> large_values.Reference:
    """The reference of bytes stored under *key*; a JSON value there is refused, saying how to read it."""
    if not large_values.is_reference(value) or (reference := large_values.parse(value)).kind != "bytes":
        raise TypeError(f"{what}({key!r:.60}) holds a JSON value, not a file: read it with get()")
    return reference


def read_file(reference: large_values.Reference, destination: str | os.PathLike[str] | BinaryIO) -> None:
    if not isinstance(destination, str | os.PathLike) and not hasattr(destination, "write"):
        raise TypeError(
            f"get_file takes a local path or a binary file object open for writing, not "
            f"{type(destination).__name__}"
        )
    object_storage.read_into(reference, destination)


#: The bytes stored with ``set_file()`` or ``set_bytes()``, whole in memory, checked.
read_bytes = object_storage.read_all


def placeholder_reference() -> str:
    """A stand-in as long as any reference: what a staged large value takes in the commit's body."""
    return json.dumps("x" * LONGEST_REFERENCE_TEXT)
