from __future__ import annotations

import dataclasses

import pytest
from airflow_shared.state import AssetScope, StateScope, TaskScope


def test_task_scope_defaults_to_unmapped():
    assert TaskScope("dag", "run", "task").map_index == -1


def test_scopes_are_frozen_and_hashable():
    scope = TaskScope("dag", "run", "task", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scope.map_index = 3  # type: ignore[misc]
    assert {scope, TaskScope("dag", "run", "task", 2)} == {scope}
    assert hash(AssetScope(1)) == hash(AssetScope(1))


@pytest.mark.parametrize("map_index", [-2, -100])
def test_map_index_below_minus_one_is_refused(map_index):
    with pytest.raises(ValueError, match="map_index must be -1"):
        TaskScope("dag", "run", "task", map_index)


@pytest.mark.parametrize("map_index", ["0", 1.0, True, None])
def test_map_index_must_be_an_int(map_index):
    with pytest.raises(TypeError, match="map_index must be an int"):
        TaskScope("dag", "run", "task", map_index)


@pytest.mark.parametrize("field", ["dag_id", "run_id", "task_id"])
@pytest.mark.parametrize("bad", ["", None, 3])
def test_task_scope_ids_must_be_non_empty_strings(field, bad):
    kwargs = {"dag_id": "d", "run_id": "r", "task_id": "t", field: bad}
    with pytest.raises(ValueError, match=f"TaskScope.{field} must be a non-empty string"):
        TaskScope(**kwargs)


@pytest.mark.parametrize("asset_id", ["1", None, 1.5, False])
def test_asset_id_must_be_an_int(asset_id):
    with pytest.raises(TypeError, match="asset_id must be an int"):
        AssetScope(asset_id)


def test_state_scope_covers_both_scope_types():
    assert isinstance(TaskScope("d", "r", "t"), StateScope)
    assert isinstance(AssetScope(1), StateScope)
    assert not isinstance("d/r/t", StateScope)


def test_dag_run_uid_defaults_to_none_and_is_part_of_the_identity():
    assert TaskScope("dag", "run", "task").dag_run_uid is None
    first = TaskScope("dag", "run", "task", 0, dag_run_uid="7.1764504000000000")
    again = TaskScope("dag", "run", "task", 0, "7.1764504000000000")
    recreated = TaskScope("dag", "run", "task", 0, dag_run_uid="7.1764504999000000")
    assert first == again and hash(first) == hash(again)
    assert first != recreated
    assert first != TaskScope("dag", "run", "task", 0)


def test_dag_run_uid_must_not_be_empty():
    with pytest.raises(ValueError, match=r"TaskScope\.dag_run_uid must be a non-empty string"):
        TaskScope("dag", "run", "task", dag_run_uid="")


@pytest.mark.parametrize("uid", [7, b"7.1", 7.1, ("7", "1")])
def test_dag_run_uid_must_be_a_string(uid):
    with pytest.raises(TypeError, match=r"TaskScope\.dag_run_uid must be a str or None"):
        TaskScope("dag", "run", "task", dag_run_uid=uid)
