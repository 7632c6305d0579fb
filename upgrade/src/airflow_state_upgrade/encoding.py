"""
How one of our rows is written in Airflow 3.3's tables.

Values are re-encoded as 3.3's Execution API stores them (``json.dumps`` with Python's defaults;
ours were compact, non-ASCII kept), so 3.3's UI and API see the text a 3.3 task would have left.
Asset writers: 3.3 knows ``task``, ``watcher`` and ``api`` (its REST API fails on any other kind);
our ``cli`` is an operator's write like ``api``. The try number has no column in 3.3.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

#: Writer kinds of ours that Airflow 3.3 calls ``api`` (it has no ``cli``).
OPERATOR_WRITERS = frozenset({"api", "cli"})


def airflow33_value(stored: str) -> str:
    """Our stored JSON text, as Airflow 3.3 would have stored the same value."""
    return json.dumps(json.loads(stored))


def same_value(text: str, other: str) -> bool:
    """Whether two JSON texts hold the same value: as canonical text, since ``1 == True`` in Python."""
    if text == other:  # what an earlier run of this command wrote
        return True
    try:
        return _canonical(text) == _canonical(other)
    except ValueError:  # not JSON at all (written around Airflow's API): equal only if identical
        return text == other


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True)


def as_utc(instant: datetime | None) -> datetime | None:
    """Read datetimes as aware UTC: SQLite and MySQL hand back naive values, and Airflow stores UTC."""
    if instant is None or instant.tzinfo is not None:
        return instant
    return instant.replace(tzinfo=UTC)


def text_key(key: str | bytes) -> str:
    """Our keys are VARBINARY (UTF-8 bytes) on MySQL and MariaDB, text elsewhere."""
    return key.decode("utf-8") if isinstance(key, bytes) else key


def outside_bmp(text: str) -> bool:
    """Whether *text* has a character MySQL's 3-byte ``utf8mb3`` cannot store (emoji, for one)."""
    return any(ord(character) > 0xFFFF for character in text)


def asset_writer(row: Any) -> dict[str, Any]:
    """Airflow 3.3's ``last_updated_by_*`` columns for one row of our ``asset_state``."""
    kind = row.updated_by
    task_fields = {
        "last_updated_by_dag_id": row.updated_by_dag_id,
        "last_updated_by_run_id": row.updated_by_run_id,
        "last_updated_by_task_id": row.updated_by_task_id,
        "last_updated_by_map_index": row.updated_by_map_index,
    }
    if kind == "task" and all(value is not None for value in task_fields.values()):
        return {"last_updated_by_kind": "task", **task_fields}
    # No writer recorded (rows written before 0.2.0 recorded writers): 3.3 shows none either.
    return {"last_updated_by_kind": "api" if kind in OPERATOR_WRITERS else None, **dict.fromkeys(task_fields)}
