# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
Large values on the operators' surfaces: the REST API and the CLI show a large value's reference
(size, blake3 digest, path) like any value, and read its object only when asked, only where the API server
or the CLI has ``[state] object_storage_path``; a changed object is an error there too.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import blake3
import pytest
from airflow_shared.state import AssetScope
from airflow_task_state import LargeValueCorruptedError, codec, large_values, manage
from airflow_task_state import object_storage as storage
from test_operator_api import (  # noqa: F401 (fixtures)
    _airflow_token_secret,
    api,
    as_role,
    asset,
    asset_url,
    backend,
    key_url,
    mint,
    redis_url,
    refused,
    run,
)


def _large(scope, key: str, data: bytes, kind: str = "json") -> large_values.Reference:
    """A large value as a task stores it: the object, then its reference."""
    reference = storage.write([data], kind)
    manage.put(scope, key, codec.encode(reference.as_value()))
    return reference


def object_url(key: str) -> str:
    return key_url(key).replace("stateEntry", "stateObject")


def test_rest_shows_a_large_values_reference_and_fetches_it_only_when_asked(api, as_role, run, asset, store):
    viewer = as_role["viewer"]
    document = json.dumps({"rows": list(range(50_000))}).encode()
    reference = _large(run.scope("submit"), "big", document)
    entry = api.get(run.ti("submit", key_url("big")), headers=viewer).json()
    shown = entry["value"][large_values.MARKER]
    assert shown["size"] == len(document) and shown["blake3"] == blake3.blake3(document).hexdigest()
    assert shown["path"] == reference.path and shown["path"].startswith(f"file://{store}/")
    fetched = api.get(run.ti("submit", object_url("big")), headers=viewer)
    assert fetched.status_code == 200 and fetched.content == document
    assert fetched.headers["content-type"] == "application/json"
    assert fetched.headers["x-content-digest"] == f"blake3={reference.digest}"
    file_bytes = os.urandom(20_000)
    _large(AssetScope(asset), "file", file_bytes, "bytes")
    fetched = api.get(asset_url(asset, object_url("file")), headers=viewer)
    assert fetched.content == file_bytes and fetched.headers["content-type"] == "application/octet-stream"
    manage.put(run.scope("submit"), "small", "1")
    message = refused(api.get(run.ti("submit", object_url("small")), headers=viewer), 409, "invalid_request")
    assert "holds a small value" in message
    refused(api.get(run.ti("submit", object_url("absent")), headers=viewer), 404, "key_not_found")


def test_fetching_an_object_needs_a_credential_and_a_forged_one_is_refused(api, mint, run, asset, store):
    _large(run.scope("submit"), "big", b"secret" * 20_000, "bytes")
    _large(AssetScope(asset), "big", b"secret" * 20_000, "bytes")
    for url in (run.ti("submit", object_url("big")), asset_url(asset, object_url("big"))):
        assert "Not authenticated" in refused(api.get(url), 401, "unauthenticated")
        forged = {"Authorization": "Bearer " + mint("admin")[:-4] + "AAAA"}
        assert "not valid" in refused(api.get(url, headers=forged), 403, "forbidden")


def test_rest_without_object_storage_shows_the_reference_but_cannot_fetch(
    api, as_role, run, store, monkeypatch
):
    reference = _large(run.scope("submit"), "big", b'"' + b"x" * 100_000 + b'"')
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", "")
    viewer = as_role["viewer"]
    entry = api.get(run.ti("submit", key_url("big")), headers=viewer).json()
    assert entry["value"][large_values.MARKER]["path"] == reference.path
    message = refused(api.get(run.ti("submit", object_url("big")), headers=viewer), 501, "unsupported")
    assert f"holds 100002 bytes at {reference.path}" in message and "object_storage_path" in message


def test_rest_never_delivers_a_corrupted_object_whole(api, as_role, run, store):
    data = os.urandom(3 * storage.CHUNK_BYTES)
    reference = _large(run.scope("submit"), "big", data, "bytes")
    # The last byte flipped: replaced by a constant, it was unchanged once in 256 runs (a CI failure).
    Path(reference.path.removeprefix("file://")).write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(LargeValueCorruptedError, match="its blake3 is"):
        api.get(run.ti("submit", object_url("big")), headers=as_role["viewer"])


def test_operators_may_write_a_fresh_reference_never_a_stale_or_malformed_one(api, as_role, run, store):
    user = as_role["user"]
    fresh = storage.write([b"x"], "bytes")
    put = api.put(run.ti("submit", key_url("copied")), json={"value": fresh.as_value()}, headers=user)
    assert put.status_code == 200, put.text
    stale = large_values.Reference(
        fresh.kind, fresh.path, fresh.size, fresh.digest, datetime.now(UTC) - timedelta(days=1)
    )
    put = api.put(run.ti("submit", key_url("stale")), json={"value": stale.as_value()}, headers=user)
    assert "longer than the commit window" in refused(put, 422, "invalid_value")
    put = api.put(
        run.ti("submit", key_url("forged")), json={"value": {large_values.MARKER: "x"}}, headers=user
    )
    assert "reserved for references" in refused(put, 422, "invalid_value")


def test_cli_shows_the_reference_and_fetches_the_object_to_a_file(cli, run, store, tmp_path):
    data = os.urandom(100_000)
    reference = _large(run.scope("submit"), "ckpt", data, "bytes")
    scope_args = ["--dag-id", run.dag_id, "--run-id", run.run_id, "--task-id", "submit"]
    [shown] = json.loads(cli("get", "ckpt", *scope_args, "-o", "json"))
    assert shown["value"][large_values.MARKER]["blake3"] == reference.digest
    target = tmp_path / "fetched.bin"
    out = cli("get", "ckpt", *scope_args, "--fetch-to", str(target))
    assert f"Wrote 100000 bytes (blake3 {reference.digest})" in out
    assert target.read_bytes() == data
    manage.put(run.scope("submit"), "small", "1")
    with pytest.raises(SystemExit, match="holds a small value"):
        cli("get", "small", *scope_args, "--fetch-to", str(target))
