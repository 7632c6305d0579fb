"""
Who last wrote a key of asset state (a ``StateWriter``) as a JSON object, the way ``get``/``list``
``-o json|yaml`` show it and export files carry it: ``{"kind": "cli"}``, ``{"kind": "api"}``, or
``{"kind": "task", "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": ..., "try_number": ...}``.
"""

from __future__ import annotations

from typing import Any

from airflow_shared.state import StateWriter, WriterKind

#: What identifies the task try that wrote, beside ``kind``.
TASK_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")

#: Map indexes and try numbers are 32-bit columns in Airflow.
LARGEST_INTEGER = 2**31 - 1


def writer_fields(writer: StateWriter | None) -> dict[str, Any] | None:
    """*writer* as a JSON object; ``None`` when the writer is not known."""
    if writer is None:
        return None
    if writer.kind is not WriterKind.TASK:
        return {"kind": writer.kind.value}
    return {"kind": writer.kind.value, **{name: getattr(writer, name) for name in TASK_FIELDS}}


def writer_from_fields(fields: object) -> StateWriter | None:
    """
    The writer a JSON object names (``None`` for null); ``ValueError`` saying what is wrong with it.
    The inverse of :func:`writer_fields`.
    """
    if fields is None:
        return None
    if not isinstance(fields, dict):
        raise ValueError(f'must be an object such as {{"kind": "cli"}} or null, not {fields!r}')
    kinds = [kind.value for kind in WriterKind]
    kind = fields.get("kind")
    if kind not in kinds:
        raise ValueError(f'"kind" must be one of {", ".join(kinds)}, not {kind!r}')
    allowed = {"kind", *TASK_FIELDS} if kind == WriterKind.TASK else {"kind"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ValueError(f"unknown field{plural} for a {kind} writer: {', '.join(unknown)}")
    if kind != WriterKind.TASK:
        return StateWriter(WriterKind(kind))
    for name in ("dag_id", "run_id", "task_id"):
        text = fields.get(name)
        if not isinstance(text, str) or not text:
            raise ValueError(f'"{name}" of a task writer must be a non-empty string, not {text!r}')
    map_index: Any = fields.get("map_index", -1)
    try_number: Any = fields.get("try_number")
    if not _integer_between(map_index, -1, LARGEST_INTEGER):
        raise ValueError(f'"map_index" of a task writer must be -1 or an index, not {map_index!r}')
    if not _integer_between(try_number, 0, LARGEST_INTEGER):
        raise ValueError(f'"try_number" of a task writer must be a try number, not {try_number!r}')
    return StateWriter.task_try(fields["dag_id"], fields["run_id"], fields["task_id"], map_index, try_number)


def _integer_between(number: object, low: int, high: int) -> bool:
    # bool is an int subclass, and true is never a map index or a try number.
    return isinstance(number, int) and not isinstance(number, bool) and low <= number <= high
