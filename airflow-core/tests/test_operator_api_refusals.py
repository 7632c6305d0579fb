# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
The operators' REST API against requests a hostile or careless client sends: another spelling of
an asset id the auth manager refused, values nested too deep to read back, paths and methods no
route takes. Each refusal says why.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from test_operator_api import (  # noqa: F401 (fixtures)
    V1,
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

# Python's json reads and writes this depth; pydantic-core's validation stops at about 255.
DEPTH = 300


@pytest.mark.parametrize("backend", ["metastore"], indirect=True)
def test_a_deeply_nested_value_that_a_write_accepts_can_be_read_back(api, as_role, run, asset, backend):
    """
    A value nested 300 deep was stored, and every read of it, and of its scope, then answered 500
    (the response model stops at about 255 levels): it is refused up front, saying why.
    """
    client = TestClient(api.app, raise_server_exceptions=False)
    admin = as_role["admin"]
    nested = json.loads("[" * DEPTH + "]" * DEPTH)
    task_url = f"{V1}/dags/{run.dag_id}/dagRuns/{run.run_id}/taskInstances/submit/"
    for scope_url in (task_url, asset_url(asset, "")):
        written = client.put(scope_url + key_url("deep"), headers=admin, json={"value": nested})
        assert "levels deep" in refused(written, 422, "invalid_value")
        assert client.get(scope_url + "state", headers=admin).status_code == 200


@pytest.mark.parametrize("backend", ["metastore"], indirect=True)
@pytest.mark.parametrize(
    ("method", "suffix", "status"),
    [("GET", "state/k", 404), ("PUT", "state/k", 404), ("POST", "stateEntry?key=k", 405)],
)
def test_a_path_or_method_no_route_takes_is_refused_with_a_reason(api, as_role, run, method, suffix, status):
    """docs/rest-api.md: errors are {"detail": {"reason", "message"}}, the retired key paths' 404/405 too."""
    answer = api.request(method, run.ti("submit", suffix), headers=as_role["op"], json={"value": 1})
    assert answer.status_code == status
    body = answer.json()
    assert isinstance(body.get("detail"), dict), body
    assert set(body["detail"]) >= {"reason", "message"}, body


@pytest.mark.parametrize("backend", ["metastore"], indirect=True)
@pytest.mark.parametrize("spelling", ["0{}", "+{}", "%20{}", "{}.0"])
def test_an_asset_refused_by_its_id_stays_refused_under_another_spelling_of_it(
    api, as_role, asset, backend, monkeypatch, spelling
):
    """
    An auth manager that refuses one asset (per-asset policies, e.g. a deny rule on asset "1")
    sees the id as the URL spells it, while the route parses it to the same asset: "01", "+1",
    " 1" and "1.0" all write asset 1 without the check ever naming asset 1.
    """
    from airflow.api_fastapi.app import get_auth_manager

    manager = get_auth_manager()
    allowed = manager.is_authorized_asset

    def all_but_this_asset(*, method, user, details=None):
        if details is not None and details.id == str(asset):
            return False
        return allowed(method=method, user=user, details=details)

    monkeypatch.setattr(manager, "is_authorized_asset", all_but_this_asset)
    admin = as_role["admin"]
    refused(api.put(asset_url(asset, key_url("k")), headers=admin, json={"value": 1}), 403, "forbidden")
    sneaked = api.put(
        f"{V1}/assets/{spelling.format(asset)}/" + key_url("k"), headers=admin, json={"value": 1}
    )
    monkeypatch.undo()
    stored = api.get(asset_url(asset, key_url("k")), headers=admin)
    api.delete(asset_url(asset, key_url("k")), headers=admin)
    assert "is not written as a plain number" in refused(sneaked, 422, "invalid_request")
    assert stored.status_code == 404, stored.text  # nothing was written
