"""
Entries in the four ``-o/--output`` formats of Airflow's CLI.

``AirflowConsole.print_as`` turns every scalar into a string (``3`` becomes ``"3"``), so json and
yaml go through its ``print_as_json``/``print_as_yaml`` with the values as they are; table and
plain get each value as JSON text, which tells ``"3"`` from ``3`` and shows dicts as JSON, not as a
Python repr.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.state.cli.writer_fields import writer_fields
from airflow.state.manage import Entry


def entry_rows(entries: Sequence[Entry], *, with_try: bool, value_as_text: bool) -> list[dict[str, Any]]:
    """
    One dict per entry. Task state records the try that wrote it (``updated_by_try``), asset state
    the whole writer (``updated_by``): as text in table and plain ("cli", "dag/run/task try 2"), as
    an object in json and yaml.
    """
    rows = []
    for entry in entries:
        value = json.dumps(entry.value, ensure_ascii=False) if value_as_text else entry.value
        row: dict[str, Any] = {
            "key": entry.key,
            "value": value,
            "version": entry.version,
            "updated_at": entry.updated_at_text,
            "expires_at": entry.expires_at_text,
        }
        if with_try:
            row["updated_by_try"] = entry.updated_by_try
        else:
            row["updated_by"] = entry.writer if value_as_text else writer_fields(entry.updated_by)
        rows.append(row)
    return rows


def print_entries(entries: Sequence[Entry], output: str, *, with_try: bool) -> None:
    """Print *entries* as ``airflow ... -o output`` prints its rows: a list, even of one."""
    from airflow.cli.simple_table import AirflowConsole

    if output in ("json", "yaml"):
        native: Any = entry_rows(entries, with_try=with_try, value_as_text=False)
        console = AirflowConsole()
        if output == "json":
            console.print_as_json(native)
        else:
            console.print_as_yaml(native)
        return
    # Keys and values are data: rich must not read "[red]" as markup or ":smile:" as an emoji.
    plain_text = AirflowConsole(markup=False, emoji=False, highlight=False)
    plain_text.print_as(entry_rows(entries, with_try=with_try, value_as_text=True), output)
