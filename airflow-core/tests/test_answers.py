"""A task's answers are serialized from their fields, not from a built model: in the model's own bytes."""

from __future__ import annotations

import pytest
from airflow_task_state.api.datamodels import (
    StateIncrementResponse,
    StateValueResponse,
    StateValuesResponse,
    StateWriteResponse,
)
from airflow_task_state.api.one_key import answer

pytestmark = pytest.mark.any_database

VALUES = [
    {"x": 1e100, "é": 1, "y": -0.0, "z": 1.5e-7, "big": 2**70},
    ['a"b\\', "\u2028", "🙂", None, True, 1.0],
    "text",
    0,
    {"nested": [{"deep": {"er": []}}]},
]


def model_bytes(model, **fields) -> bytes:
    return model(**fields).model_dump_json().encode()


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("version", [None, 7])
def test_an_answer_is_the_bytes_its_response_model_gives(value, version):
    for model, fields in [
        (StateValueResponse, {"key": "clé", "value": value, "version": version}),
        (StateWriteResponse, {"key": "clé", "version": version}),
        (StateValuesResponse, {"values": {"a": value, "b": value}}),
    ]:
        assert answer(model, **fields).body == model_bytes(model, **fields)


def test_an_answer_with_other_fields_than_its_model_is_a_bug_caught_at_once():
    with pytest.raises(AssertionError, match=r"StateIncrementResponse: \['key', 'value'\]"):
        answer(StateIncrementResponse, key="k", version=1)
    assert answer(StateIncrementResponse, key="k", value=-3).media_type == "application/json"
