"""
Entries as JSON objects: the lines of ``airflow state export``/``import`` (one per key, with the
fields ``export --help`` lists) and the rows of ``get``/``list`` (the same, with the key's version).
There is no format version field: files exported before expiry existed lack ``expires_at`` and
``updated_by`` and still import. Every field but ``scope``, the key, the value and what names the
scope may be null or left out, and so may ``map_index`` (-1) and one of ``asset_name``/``asset_uri``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from airflow.cli.simple_table import AirflowConsole
from airflow_shared.state import StateWriter, TaskScope, WriterKind, validate_key

from airflow_task_state import codec, large_values, object_storage
from airflow_task_state.cli.definition import LARGEST_INTEGER  # map indexes and try numbers are 32-bit too
from airflow_task_state.manage import AssetInfo, Entry

T = TypeVar("T")

#: What names a task instance in a task row; with ``try_number``, a task writer in ``updated_by``.
TASK_FIELDS = ("dag_id", "run_id", "task_id", "map_index")
WRITER_TASK_FIELDS = (*TASK_FIELDS, "try_number")

# updated_by_try is accepted on asset rows when null: a file may give every row the same fields.
_COMMON_FIELDS = {"scope", "key", "value", "updated_at", "updated_by_try", "expires_at"}
_FIELDS = {
    "task": _COMMON_FIELDS | set(TASK_FIELDS),
    "asset": _COMMON_FIELDS | {"asset_name", "asset_uri", "updated_by"},
}


def count(number: int, thing: str) -> str:
    """``1 key``, ``2 keys``."""
    return f"{number} {thing}{'' if number == 1 else 's'}"


def writer_fields(writer: StateWriter | None) -> dict[str, Any] | None:
    """*writer* as a JSON object: ``{"kind": "cli"}``, ``{"kind": "task", "dag_id": ..., ...}``."""
    if writer is None:
        return None
    fields = WRITER_TASK_FIELDS if writer.kind is WriterKind.TASK else ()
    return {"kind": writer.kind.value, **{name: getattr(writer, name) for name in fields}}


def entry_fields(entry: Entry, *, task: bool, version: bool = False) -> dict[str, Any]:
    """The key, value, (version,) when it was written and expires, and who wrote it: try or writer."""
    fields = {"key": entry.key, "value": entry.value}
    if version:
        fields["version"] = entry.version
    for name in ("updated_at", "expires_at"):
        moment = getattr(entry, name)
        fields[name] = None if moment is None else moment.isoformat()
    if task:
        fields["updated_by_try"] = entry.updated_by_try
    else:
        fields["updated_by"] = writer_fields(entry.updated_by)
    return fields


def export_row(owner: TaskScope | AssetInfo, entry: Entry) -> dict[str, Any]:
    """One row of an export file: where the key is, then the entry."""
    if isinstance(owner, TaskScope):
        where = {"scope": "task", **{name: getattr(owner, name) for name in TASK_FIELDS}}
    else:
        where = {"scope": "asset", "asset_name": owner.name, "asset_uri": owner.uri}
    return {**where, **entry_fields(entry, task=isinstance(owner, TaskScope))}


def print_entries(entries: Sequence[Entry], output: str, *, with_try: bool) -> None:
    """Print *entries* as ``airflow ... -o output`` prints its rows: a list, even of one."""
    rows: Any = [entry_fields(entry, task=with_try, version=True) for entry in entries]
    # AirflowConsole.print_as turns every scalar into a string (3 becomes "3"): json and yaml go
    # through print_as_json/print_as_yaml with the values as they are, table and plain get each
    # value as JSON text, which tells "3" from 3 and shows dicts as JSON rather than a Python repr.
    if output in ("json", "yaml"):
        console = AirflowConsole()
        (console.print_as_json if output == "json" else console.print_as_yaml)(rows)
        return
    for row, entry in zip(rows, entries, strict=True):
        row["value"] = json.dumps(entry.value, ensure_ascii=False)
        if not with_try:
            row["updated_by"] = entry.updated_by and str(entry.updated_by)  # "cli", "dag/run/task try 2"
    # Keys and values are data: rich must not read "[red]" as markup or ":smile:" as an emoji.
    AirflowConsole(markup=False, emoji=False, highlight=False).print_as(rows, output)


#: Characters JSON may leave raw that line readers such as ``str.splitlines`` break lines at.
_LINE_BREAKING = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def dump_row(row: dict[str, Any]) -> str:
    """
    One line of the file, non-ASCII as it is (the file is UTF-8). What other readers take for line
    breaks is escaped: it can only occur inside strings, where the escape means the same character.
    """
    return json.dumps(row, ensure_ascii=False, allow_nan=False).translate(_LINE_BREAKING)


class RowError(ValueError):
    """What is wrong with one line of an import file (the caller adds the line number)."""


@dataclass(frozen=True)
class AssetTarget:
    """The asset a row names: by name and/or URI."""

    name: str | None
    uri: str | None


@dataclass(frozen=True)
class ImportRow:
    """A valid row: where it goes (as the source named it), the key, the value as JSON text, etc."""

    target: TaskScope | AssetTarget
    key: str
    value_text: str
    writer: StateWriter | None
    expires_at: datetime | None


def parse_row(text: str) -> ImportRow:
    """The row on one line of an import file; :class:`RowError` says what is wrong with it."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as error:
        raise RowError(f"not JSON: {error.msg} at column {error.colno}") from None
    except RecursionError:
        raise RowError(f"nested too deeply to read (a value may nest {codec.MAX_DEPTH} levels)") from None
    if not isinstance(row, dict):
        raise RowError(f"a row must be a JSON object, not {type(row).__name__}")
    kind = row.get("scope")
    if kind not in _FIELDS:
        raise RowError(f'"scope" must be "task" or "asset", not {kind!r}')
    target = _task_target(row) if kind == "task" else _asset_target(row)
    _refuse_unknown(row, _FIELDS[kind], f"{kind} state")
    _checked(row, "key", validate_key)
    # The codec's checks, the target's [state] max_value_bytes included.
    value_text = _checked(row, "value", _value_text)
    _timestamp(row, "updated_at", "null")
    writer = _task_writer(row, target) if isinstance(target, TaskScope) else _asset_writer(row)
    expires_at = _timestamp(row, "expires_at", "null (never)")
    if expires_at is not None and expires_at.tzinfo is None:
        # Which zone a bare time is in is a guess; export always writes the offset.
        text = row["expires_at"]
        raise RowError(f'"expires_at" must name its UTC offset (e.g. {text}+00:00), not {text!r}')
    return ImportRow(target, row["key"], value_text, writer, expires_at)


def _integer(row: dict[str, Any], name: str, low: int, what: str) -> int | None:
    number = row.get(name)
    # type(), not isinstance: bool is an int subclass, and true is never a map index or a try number.
    if number is None or (type(number) is int and low <= number <= LARGEST_INTEGER):
        return number
    raise RowError(f'"{name}" must be {what}, got {number!r}')


def _text_field(row: dict[str, Any], name: str, *, required: bool = True) -> Any:
    value = row.get(name)
    if (value is not None or required) and (not isinstance(value, str) or not value):
        raise RowError(f'"{name}" must be a non-empty string, got {value!r}')
    return value


def _task_target(row: dict[str, Any]) -> TaskScope:
    dag_id, run_id, task_id = (_text_field(row, name) for name in ("dag_id", "run_id", "task_id"))
    map_index = _integer(row, "map_index", -1, f"-1 (not mapped) or an index from 0 to {LARGEST_INTEGER}")
    return TaskScope(dag_id, run_id, task_id, -1 if map_index is None else map_index)


def _asset_target(row: dict[str, Any]) -> AssetTarget:
    name = _text_field(row, "asset_name", required=False)
    uri = _text_field(row, "asset_uri", required=False)
    if name is None and uri is None:
        raise RowError('an asset row needs "asset_name" or "asset_uri" (export writes both)')
    return AssetTarget(name, uri)


def _refuse_unknown(fields: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise RowError(f"unknown field{'s' if len(unknown) > 1 else ''} for {what}: {', '.join(unknown)}")


def _value_text(value: Any) -> str:
    """
    A row's value as it will be stored. A large value's reference is checked here and written with
    a copy of its object (:func:`relocated`): its own may be collected any time after its window.
    """
    if not large_values.is_reference(value):
        return codec.encode(value)
    large_values.parse(value)
    if not object_storage.configured():
        raise ValueError(
            "a large value's reference: importing it copies its object, which needs [state] "
            "object_storage_path (and the storage's credentials) where the import runs"
        )
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def relocated(text: str) -> str:
    """*text*, or for a large value's reference one to a fresh copy of its object (see _value_text)."""
    if not text.startswith(large_values.TEXT_PREFIX):
        return text
    copied = object_storage.copy(large_values.parse(json.loads(text)))
    return codec.encode(copied.as_value())


def _checked(row: dict[str, Any], name: str, check: Callable[[Any], T]) -> T:
    if name not in row:
        raise RowError(f'"{name}" is missing')
    try:
        return check(row[name])
    except (ValueError, TypeError) as error:
        raise RowError(f"invalid {name}: {error}") from None


def _timestamp(row: dict[str, Any], name: str, null: str) -> datetime | None:
    text = row.get(name)
    try:
        return None if text is None else datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise RowError(f'"{name}" must be an ISO 8601 timestamp or {null}, not {text!r}') from None


def _task_writer(row: dict[str, Any], target: TaskScope) -> StateWriter | None:
    try_number = _integer(row, "updated_by_try", 0, f"a try number (0 to {LARGEST_INTEGER}) or null")
    if try_number is None:
        return None
    return StateWriter.task_try(target.dag_id, target.run_id, target.task_id, target.map_index, try_number)


def _asset_writer(row: dict[str, Any]) -> StateWriter | None:
    """The writer ``updated_by`` names (the inverse of :func:`writer_fields`), ``None`` for null."""
    if row.get("updated_by_try") is not None:
        raise RowError('asset state records no try: "updated_by_try" must be null or left out')
    fields = row.get("updated_by")
    try:
        if fields is None:
            return None
        if not isinstance(fields, dict):
            raise RowError(f'must be an object such as {{"kind": "cli"}} or null, not {fields!r}')
        kinds = [kind.value for kind in WriterKind]
        kind = fields.get("kind")
        if kind not in kinds:
            raise RowError(f'"kind" must be one of {", ".join(kinds)}, not {kind!r}')
        task = kind == WriterKind.TASK
        _refuse_unknown(fields, {"kind", *WRITER_TASK_FIELDS} if task else {"kind"}, f"a {kind} writer")
        values = {name: fields.get(name) for name in WRITER_TASK_FIELDS}
        if task:
            values["map_index"] = fields.get("map_index", -1)
        # StateWriter checks its own fields: what import refuses is what every backend refuses.
        return StateWriter(WriterKind(kind), **values)
    except (ValueError, TypeError) as error:  # RowError, or what StateWriter refuses
        raise RowError(f'"updated_by": {error}') from None
