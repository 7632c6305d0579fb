"""
Entries in the four ``-o/--output`` formats of Airflow's CLI, and counts in messages.

``AirflowConsole.print_as`` turns every scalar into a string (``3`` becomes ``"3"``), so json and
yaml go through its ``print_as_json``/``print_as_yaml`` with the values as they are; table and
plain get each value as JSON text, which tells ``"3"`` from ``3`` and shows dicts as JSON, not as a
Python repr.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.cli.simple_table import AirflowConsole
from airflow.state.cli.transfer_format import entry_fields
from airflow.state.manage import Entry


def count(number: int, thing: str) -> str:
    """``1 key``, ``2 keys``."""
    return f"{number} {thing}{'' if number == 1 else 's'}"


def entry_rows(entries: Sequence[Entry], *, with_try: bool, value_as_text: bool) -> list[dict[str, Any]]:
    """
    One dict per entry. Task state records the try that wrote it (``updated_by_try``), asset state
    the whole writer (``updated_by``): as text in table and plain ("cli", "dag/run/task try 2"), as
    an object in json and yaml.
    """
    rows = []
    for entry in entries:
        # The version third: key, value, version, then the rest as export files have it.
        row = {"key": entry.key, "value": entry.value, "version": entry.version}
        row.update(entry_fields(entry, task=with_try))
        if value_as_text:
            row["value"] = json.dumps(entry.value, ensure_ascii=False)
            if not with_try:
                row["updated_by"] = entry.writer
        rows.append(row)
    return rows


def print_entries(entries: Sequence[Entry], output: str, *, with_try: bool) -> None:
    """Print *entries* as ``airflow ... -o output`` prints its rows: a list, even of one."""
    if output in ("json", "yaml"):
        console = AirflowConsole()
        native: Any = entry_rows(entries, with_try=with_try, value_as_text=False)  # typed as a dict
        (console.print_as_json if output == "json" else console.print_as_yaml)(native)
        return
    # Keys and values are data: rich must not read "[red]" as markup or ":smile:" as an emoji.
    plain_text = AirflowConsole(markup=False, emoji=False, highlight=False)
    plain_text.print_as(entry_rows(entries, with_try=with_try, value_as_text=True), output)
