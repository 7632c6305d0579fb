"""
The JSON-lines format of ``airflow state export`` and ``import``: one object per stored key.

Task state::

    {"scope": "task", "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": -1,
     "key": ..., "value": <JSON>, "updated_at": "2026-01-02T03:04:05.123456+00:00", "updated_by_try": 2,
     "expires_at": "2026-02-01T03:04:05.123456+00:00"}

Asset state::

    {"scope": "asset", "asset_name": ..., "asset_uri": ..., "key": ..., "value": <JSON>,
     "updated_at": ..., "expires_at": null,
     "updated_by": {"kind": "task", "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": -1,
                    "try_number": 1}}

Assets are named by name and URI, not id: ids differ between deployments. ``updated_at`` is what
the source recorded, for the reader; the target stamps its own time when it writes.
``updated_by_try`` (task state) and ``updated_by`` (asset state: ``{"kind": "cli"}``, ``"api"``, or
a task try as above; see :mod:`.writer_fields`) are kept: the import writes as that writer.
``expires_at`` is kept too: the key expires when it would have at the source, and a row already
expired when it is imported is skipped. Versions are not carried: a key the import creates starts
at version 1, one it overwrites goes on from its own version.

There is no format version field. The file of an export before expiry existed (``airflow state``
of releases before 0.2) is the same format without ``expires_at`` and ``updated_by``, and still imports: a row
without ``expires_at`` never expires (as the state it came from never did), one without
``updated_by`` has no known writer. Every field but ``scope``, the key and the value, and what names
the scope, may be null or left out, and so may ``map_index`` (-1) and one of
``asset_name``/``asset_uri``, for files written by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow.state import codec
from airflow.state.cli.writer_fields import writer_fields, writer_from_fields
from airflow.state.manage import AssetInfo, Entry
from airflow_shared.state import StateWriter, TaskScope, validate_key

TASK = "task"
ASSET = "asset"

#: Map indexes and try numbers are 32-bit columns in Airflow (and in the metastore).
LARGEST_INTEGER = 2**31 - 1

# updated_by_try is accepted on asset rows when null: a file may give every row the same fields.
_COMMON_FIELDS = {"scope", "key", "value", "updated_at", "updated_by_try", "expires_at"}
_TASK_FIELDS = _COMMON_FIELDS | {"dag_id", "run_id", "task_id", "map_index"}
_ASSET_FIELDS = _COMMON_FIELDS | {"asset_name", "asset_uri", "updated_by"}


def task_row(scope: TaskScope, entry: Entry) -> dict[str, Any]:
    return {
        "scope": TASK,
        "dag_id": scope.dag_id,
        "run_id": scope.run_id,
        "task_id": scope.task_id,
        "map_index": scope.map_index,
        "key": entry.key,
        "value": entry.value,
        "updated_at": entry.updated_at_text,
        "updated_by_try": entry.updated_by_try,
        "expires_at": entry.expires_at_text,
    }


def asset_row(asset: AssetInfo, entry: Entry) -> dict[str, Any]:
    return {
        "scope": ASSET,
        "asset_name": asset.name,
        "asset_uri": asset.uri,
        "key": entry.key,
        "value": entry.value,
        "updated_at": entry.updated_at_text,
        "expires_at": entry.expires_at_text,
        "updated_by": writer_fields(entry.updated_by),
    }


#: Characters JSON may leave raw that line readers such as ``str.splitlines`` break lines at.
_LINE_BREAKING = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dump_row(row: dict[str, Any]) -> str:
    """
    One line of the file. Non-ASCII stays as it is (the file is UTF-8): readable, and exact. The
    few characters other readers take for line breaks are escaped, so every reader sees one row per
    line; they can only occur inside strings, where the escape means the same character.
    """
    return json.dumps(row, ensure_ascii=False, allow_nan=False).translate(_LINE_BREAKING)


# --- reading ------------------------------------------------------------------------------------


class RowError(ValueError):
    """What is wrong with one line of an import file (the caller adds the line number)."""


@dataclass(frozen=True)
class TaskTarget:
    """The task instance a row names, as the source deployment named it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int


@dataclass(frozen=True)
class AssetTarget:
    """The asset a row names: by name and/or URI."""

    name: str | None
    uri: str | None


@dataclass(frozen=True)
class ImportRow:
    """
    A valid row: where it goes, the key, the value as the JSON text to store, the writing try (task
    state) or writer (asset state), and when it expires.
    """

    target: TaskTarget | AssetTarget
    key: str
    value_text: str
    updated_by_try: int | None
    expires_at: datetime | None = None
    updated_by: StateWriter | None = None

    @property
    def writer(self) -> StateWriter | None:
        """Who the import writes as: the row's task try, or asset writer; ``None`` when not known."""
        target = self.target
        if isinstance(target, TaskTarget):
            if self.updated_by_try is None:
                return None
            return StateWriter.task_try(
                target.dag_id, target.run_id, target.task_id, target.map_index, self.updated_by_try
            )
        return self.updated_by


def parse_row(text: str) -> ImportRow:
    """The row on one line of an import file; :class:`RowError` says what is wrong with it."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as error:
        raise RowError(f"not JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(row, dict):
        raise RowError(f"a row must be a JSON object, not {type(row).__name__}")
    kind = row.get("scope")
    if kind == TASK:
        target: TaskTarget | AssetTarget = _task_target(row)
    elif kind == ASSET:
        target = _asset_target(row)
    else:
        raise RowError(f'"scope" must be "task" or "asset", not {kind!r}')
    unknown = sorted(set(row) - (_TASK_FIELDS if kind == TASK else _ASSET_FIELDS))
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise RowError(f"unknown field{plural} for {kind} state: {', '.join(unknown)}")
    return ImportRow(
        target,
        _key(row),
        _value_text(row),
        _updated_by_try(row, kind),
        expires_at=_expires_at(row),
        updated_by=_updated_by(row),
    )


def _integer_between(number: object, low: int, high: int) -> bool:
    # bool is an int subclass, and true is never a map index or a try number.
    return isinstance(number, int) and not isinstance(number, bool) and low <= number <= high


def _text_field(row: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = row.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise RowError(f'"{name}" must be a non-empty string, got {value!r}')
    return value


def _task_target(row: dict[str, Any]) -> TaskTarget:
    dag_id, run_id, task_id = (_text_field(row, name) for name in ("dag_id", "run_id", "task_id"))
    map_index = row.get("map_index", -1)
    if map_index is None:
        map_index = -1
    if not _integer_between(map_index, -1, LARGEST_INTEGER):
        raise RowError(
            f'"map_index" must be -1 (not mapped) or an index from 0 to {LARGEST_INTEGER}, got {map_index!r}'
        )
    assert dag_id and run_id and task_id  # required text fields are never None
    return TaskTarget(dag_id, run_id, task_id, map_index)


def _asset_target(row: dict[str, Any]) -> AssetTarget:
    name = _text_field(row, "asset_name", required=False)
    uri = _text_field(row, "asset_uri", required=False)
    if name is None and uri is None:
        raise RowError('an asset row needs "asset_name" or "asset_uri" (export writes both)')
    return AssetTarget(name, uri)


def _key(row: dict[str, Any]) -> str:
    if "key" not in row:
        raise RowError('"key" is missing')
    key = row["key"]
    try:
        validate_key(key)
    except (ValueError, TypeError) as error:
        raise RowError(f"invalid key: {error}") from None
    return key


def _value_text(row: dict[str, Any]) -> str:
    if "value" not in row:
        raise RowError('"value" is missing')
    try:
        # The codec's checks, the target's [state] max_value_bytes included.
        return codec.encode(row["value"])
    except (ValueError, TypeError) as error:
        raise RowError(f"invalid value: {error}") from None


def _updated_by_try(row: dict[str, Any], kind: str) -> int | None:
    updated_at = row.get("updated_at")
    if updated_at is not None:
        try:
            datetime.fromisoformat(updated_at)
        except (TypeError, ValueError):
            raise RowError(
                f'"updated_at" must be an ISO 8601 timestamp or null, not {updated_at!r}'
            ) from None
    try_number = row.get("updated_by_try")
    if try_number is None:
        return None
    if kind == ASSET:
        raise RowError('asset state records no try: "updated_by_try" must be null or left out')
    if not _integer_between(try_number, 0, LARGEST_INTEGER):
        raise RowError(
            f'"updated_by_try" must be a try number (0 to {LARGEST_INTEGER}) or null, got {try_number!r}'
        )
    return try_number


def _expires_at(row: dict[str, Any]) -> datetime | None:
    text = row.get("expires_at")
    if text is None:
        return None
    try:
        expires_at = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise RowError(f'"expires_at" must be an ISO 8601 timestamp or null (never), not {text!r}') from None
    if expires_at.tzinfo is None:
        # Which zone a bare time is in is a guess; export always writes the offset.
        raise RowError(f'"expires_at" must name its UTC offset (e.g. {text}+00:00), not {text!r}')
    return expires_at


def _updated_by(row: dict[str, Any]) -> StateWriter | None:
    try:
        return writer_from_fields(row.get("updated_by"))
    except ValueError as error:
        raise RowError(f'"updated_by": {error}') from None
