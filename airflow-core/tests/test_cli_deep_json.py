"""`airflow state import` and `set` refuse JSON nested too deeply to parse, saying where."""

from __future__ import annotations

import json


def test_a_row_nested_too_deep_to_parse_is_a_refusal_naming_its_line(tmp_path, refused):
    """
    A hostile or corrupted file: a row whose value nests 100000 deep. json.loads raises
    RecursionError, which parse_row does not catch (only JSONDecodeError): the import dies with a
    traceback instead of "line 2: not JSON ...", and the good row on line 1 is never reported.
    """
    good = {"scope": "asset", "asset_name": "nowhere", "asset_uri": "s3://nowhere", "key": "k", "value": 1}
    deep = '{"scope": "asset", "asset_name": "x", "key": "k", "value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    file = tmp_path / "state.jsonl"
    file.write_text(json.dumps(good) + "\n" + deep + "\n")
    refusal = refused("import", str(file))
    assert refusal.startswith("refused 2 of 2 rows; nothing was imported"), refusal
    assert "line 2: nested too deeply to read" in refusal.stderr, refusal.stderr


def test_a_value_nested_too_deep_to_parse_is_refused_by_set(refused):
    """`airflow state set k '[[[...]]]'` (100000 deep): RecursionError, not "invalid value: ..."."""
    deep = "[" * 100_000 + "]" * 100_000
    message = refused("set", "k", deep, "--asset-id", "1")
    assert message.startswith("invalid value"), message
