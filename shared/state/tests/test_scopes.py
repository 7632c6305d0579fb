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
