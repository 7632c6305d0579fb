"""
How one of our rows is written for Airflow 3.3: pure functions, so they are tested here directly
(in this environment, on its Python); tests/test_upgrade_to_airflow33.py runs the whole command
against both Airflow versions.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from airflow_state_upgrade.encoding import airflow33_value, as_utc, asset_writer, outside_bmp, same_value


@pytest.mark.parametrize(
    "ours",
    ['{"ville":"Zürich","n":[1,2.5,true,null]}', '"🚀"', "12345678901234567890123", "-0.5", '"a\\"b"'],
)
def test_values_are_stored_as_airflow_33_stores_them(ours: str):
    value = json.loads(ours)
    assert airflow33_value(ours) == json.dumps(value)  # what 3.3's Execution API stores
    assert json.loads(airflow33_value(ours)) == value


def test_same_value_compares_json_not_python_equality():
    assert same_value('{"a":1,"b":2}', '{"b": 2, "a": 1}')
    # 1 == 1.0 == True in Python, but a task that stored true must not find 1.
    assert not same_value("true", "1")
    assert not same_value("1", "1.0")
    assert not same_value('"x"', '"y"')
    assert same_value("not json", "not json") and not same_value("not json", '"not json"')


def writer_row(updated_by, dag_id="d", run_id="r", task_id="t", map_index=-1):
    return SimpleNamespace(
        updated_by=updated_by,
        updated_by_dag_id=dag_id,
        updated_by_run_id=run_id,
        updated_by_task_id=task_id,
        updated_by_map_index=map_index,
    )


def test_asset_writers_map_to_the_kinds_airflow_33_knows():
    assert asset_writer(writer_row("task")) == {
        "last_updated_by_kind": "task",
        "last_updated_by_dag_id": "d",
        "last_updated_by_run_id": "r",
        "last_updated_by_task_id": "t",
        "last_updated_by_map_index": -1,
    }
    none = dict.fromkeys(
        (
            "last_updated_by_dag_id",
            "last_updated_by_run_id",
            "last_updated_by_task_id",
            "last_updated_by_map_index",
        )
    )
    # 3.3 has no "cli": an operator's write outside any task is "api" there; no task fields.
    assert asset_writer(writer_row("cli", None, None, None, None)) == {"last_updated_by_kind": "api", **none}
    assert asset_writer(writer_row("api", None, None, None, None)) == {"last_updated_by_kind": "api", **none}
    # 3.3's REST API refuses kind "task" without all four task fields: then no writer at all.
    assert asset_writer(writer_row("task", map_index=None)) == {"last_updated_by_kind": None, **none}
    assert asset_writer(writer_row(None, None, None, None, None)) == {"last_updated_by_kind": None, **none}


def test_naive_datetimes_are_utc_and_characters_mysql_utf8mb3_cannot_store_are_found():
    assert as_utc(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert as_utc(None) is None
    assert outside_bmp("job 🚀") and not outside_bmp("clé ü 中文")
