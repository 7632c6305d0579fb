"""
The value codec (airflow_task_state.codec), which the task side (set, set_many, stage), the state APIs
and the CLI use: a value comes back as it was stored, or is refused saying what was wrong.
"""

from __future__ import annotations

import json

import pytest
from airflow_task_state import codec

# Pure code, no database: it runs once, in the SQLite pass.
pytestmark = pytest.mark.any_database


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1: "from the int key", "1": "from the str key"}, id="int-and-str-key"),
        pytest.param({True: "from the bool key", "true": "from the str key"}, id="bool-and-str-key"),
        pytest.param({None: "from None", "null": "from the str key"}, id="none-and-str-key"),
    ],
)
def test_a_dict_whose_keys_collide_as_json_is_refused_not_half_stored(value):
    # json.dumps turns 1/True/None keys into "1"/"true"/"null": two keys become one JSON key twice,
    # and every JSON reader (the state API's included) keeps only the last: one value is lost silently.
    with pytest.raises(TypeError, match="object keys must be strings"):
        codec.encode(value)


def test_a_non_string_key_is_refused_however_deep_it_is():
    # task_state.set("k", {1: "x"}); task_state.get("k")[1] would be a KeyError: {"1": "x"} came back.
    for value in ({1: "x"}, {"a": [{"b": {2.5: "x"}}]}, [[{(1, 2): "x"}]]):
        with pytest.raises(TypeError, match="object keys must be strings"):
            codec.encode(value)
    assert codec.decode(codec.encode({"a": [{"b": {"c": 1}}]})) == {"a": [{"b": {"c": 1}}]}


def test_nesting_past_the_limit_is_refused_and_up_to_it_stored():
    at_limit = json.loads("[" * codec.MAX_DEPTH + "]" * codec.MAX_DEPTH)
    assert codec.decode(codec.encode(at_limit)) == at_limit
    for deeper in ([at_limit], {"k": at_limit}):
        with pytest.raises(ValueError, match=f"nests more than {codec.MAX_DEPTH} levels deep"):
            codec.encode(deeper)


def test_an_integer_too_long_for_json_is_refused_for_what_it_is():
    with pytest.raises(ValueError) as refused:
        codec.encode({"n": 10**5000})
    message = str(refused.value)
    # It was blamed on NaN and Infinity, which JSON's own refusal of long integers has nothing to do with.
    assert "NaN" not in message and "Infinity" not in message, message
    assert message.startswith("state value cannot be stored as JSON: Exceeds the limit"), message
