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
    values = {name: fields.get(name) for name in TASK_FIELDS}
    if kind == WriterKind.TASK:
        values["map_index"] = fields.get("map_index", -1)
    try:
        # StateWriter checks its own fields: what import refuses is what every backend refuses.
        return StateWriter(WriterKind(kind), **values)
    except TypeError as error:
        raise ValueError(str(error)) from None
