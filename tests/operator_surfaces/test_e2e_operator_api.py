"""
The operators' REST API on a real deployment (``operator_deployment``: `airflow api-server` on
PostgreSQL, SimpleAuthManager users of every role, and alice, a viewer granted DAG operator_alpha
only), over real HTTP, on the state that real task processes wrote.

The deployment is shared with the UI tests: these tests write keys of their own (``e2e-api/...``)
and remove them, and restore whatever else they change.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import httpx
import jwt
import pytest
from state_testing.deployment import Deployment

USERS = ("admin", "viewer", "editor", "ops", "alice")
ALPHA, BETA = "operator_alpha", "operator_beta"
RUN_ID = "first"


@pytest.fixture(scope="module")
def deployment(operator_deployment: Deployment) -> Deployment:
    return operator_deployment


@pytest.fixture(scope="module")
def tokens(deployment: Deployment) -> dict[str, str]:
    """Each user's Airflow token, as `POST /auth/token` issues it."""
    return {user: deployment.token(user) for user in USERS}


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    """A client of the state API's operator routes, with no credentials of its own."""
    with httpx.Client(base_url=f"{deployment.api_url}/state/api/v1", timeout=30, trust_env=False) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def asset_ids(deployment: Deployment) -> dict[str, int]:
    """The id of each operator DAG's asset, by DAG id."""
    rows = deployment.query("SELECT id, name FROM asset WHERE name LIKE 'operator_%_orders'")
    return {row["name"].removesuffix("_orders"): row["id"] for row in rows}


@pytest.fixture
def key() -> str:
    """A key of this test's own."""
    return f"e2e-api/{uuid.uuid4().hex[:8]}"


def ti_url(dag_id: str, task_id: str, suffix: str = "state") -> str:
    return f"/dags/{dag_id}/dagRuns/{RUN_ID}/taskInstances/{task_id}/{suffix}"


def refused(response: httpx.Response, status: int, reason: str) -> str:
    assert response.status_code == status, (response.request.method, response.request.url, response.text)
    body = response.json()
    assert set(body) == {"detail"} and body["detail"]["reason"] == reason, body
    return str(body["detail"]["message"])


def task_routes(dag_id: str, key: str) -> list[tuple[str, str, dict]]:
    """(method, URL, query) of every task state route of the DAG's run; `load` holds no task state."""
    by_query = ti_url(dag_id, "submit", "stateEntry")
    return [
        ("GET", f"/dags/{dag_id}/dagRuns/{RUN_ID}/state", {}),
        ("GET", ti_url(dag_id, "submit"), {}),
        ("DELETE", ti_url(dag_id, "load"), {}),
        ("DELETE", ti_url(dag_id, "load"), {"all_map_indices": "true"}),
        ("PUT", by_query, {"key": key}),
        ("GET", by_query, {"key": key}),
        ("DELETE", by_query, {"key": key}),
        ("POST", ti_url(dag_id, "submit", "stateIncrement"), {"key": key + ".count"}),
        ("DELETE", ti_url(dag_id, "submit", "stateEntry"), {"key": key + ".count"}),
    ]


def asset_routes(asset_id: int, key: str) -> list[tuple[str, str, dict]]:
    """Every asset state route but the clear (which the UI tests' asset state must survive)."""
    by_query = f"/assets/{asset_id}/stateEntry"
    return [
        ("GET", "/assets", {}),
        ("GET", f"/assets/{asset_id}/state", {}),
        ("PUT", by_query, {"key": key}),
        ("GET", by_query, {"key": key}),
        ("DELETE", by_query, {"key": key}),
        ("POST", f"/assets/{asset_id}/stateIncrement", {"key": key + ".count"}),
        ("DELETE", by_query, {"key": key + ".count"}),
    ]


def send(http: httpx.Client, method: str, url: str, params: dict, **kwargs) -> httpx.Response:
    bodies = {
        "PUT": {"json": {"value": {"written by": "test_e2e_operator_api"}}},
        "POST": {"json": {"by": 2}},
    }
    body = bodies.get(method, {})
    return http.request(method, url, params=params, **body, **kwargs)


def expect_allowed(response: httpx.Response, method: str, url: str) -> None:
    """An allowed call: 200 or 204, or a 404 `key_not_found` for a GET of a key no one wrote."""
    if response.status_code == 404:
        assert method == "GET" and response.json()["detail"]["reason"] == "key_not_found", response.text
    else:
        assert response.status_code in (200, 204), (method, url, response.text)


# --- what the tasks wrote ------------------------------------------------------------------------


def test_what_the_tasks_wrote_is_visible_with_their_try(http, tokens):
    viewer = bearer(tokens["viewer"])
    listing = http.get(f"/dags/{ALPHA}/dagRuns/{RUN_ID}/state", headers=viewer).json()
    counts = {(ti["task_id"], ti["map_index"]): ti["key_count"] for ti in listing["task_instances"]}
    assert counts[("submit", -1)] >= 2 and counts[("partition", 0)] >= 1 and counts[("partition", 1)] >= 1
    assert (listing["can_edit"], listing["can_delete"]) == (False, False)

    job = http.get(
        ti_url(ALPHA, "submit", "stateEntry"), params={"key": "remote_job_id"}, headers=viewer
    ).json()
    assert job["value"] == "operator_alpha-job-001" and job["updated_by_try"] == 1
    assert job["updated_at"].endswith("Z") and job["version"] == 1
    # Task state expires after [state] default_task_retention (30 days) unless the task said otherwise.
    lives = datetime.fromisoformat(job["expires_at"]) - datetime.fromisoformat(job["updated_at"])
    assert abs(lives - timedelta(days=30)) < timedelta(minutes=1)
    progress = http.get(
        ti_url(ALPHA, "submit", "stateEntry"), params={"key": "progress"}, headers=viewer
    ).json()
    assert progress["value"] == {"pages": 3, "done": False, "note": "naïve ☃"}
    assert progress["updated_by_try"] == 1
    for map_index in (0, 1):
        offset = http.get(
            ti_url(BETA, "partition", "stateEntry"),
            params={"key": "offset", "map_index": map_index},
            headers=viewer,
        ).json()
        assert offset["value"] == map_index * 1000 and offset["updated_by_try"] == 1


def test_asset_state_written_by_the_tasks_is_listed(http, tokens, asset_ids):
    viewer = bearer(tokens["viewer"])
    listing = http.get("/assets", headers=viewer).json()
    ours = {asset["name"]: asset for asset in listing["assets"] if asset["name"].startswith("operator_")}
    assert set(ours) >= {"operator_alpha_orders", "operator_beta_orders"}
    assert ours["operator_alpha_orders"]["uri"] == "file:///tmp/operator/alpha_orders"
    assert listing["can_edit"] is False
    state = http.get(f"/assets/{asset_ids['operator_alpha']}/state", headers=viewer).json()
    watermark = next(entry for entry in state["entries"] if entry["key"] == "watermark")
    assert watermark["value"] == "2026-11-30T00:00:00+00:00"
    # Asset state records which task instance wrote it (its try in updated_by: an asset has no
    # tries, so no updated_by_try), and never expires unless asked to.
    assert "updated_by_try" not in watermark
    assert watermark["updated_by"] == {
        "kind": "task",
        "dag_id": ALPHA,
        "run_id": RUN_ID,
        "task_id": "load",
        "map_index": -1,
        "try_number": 1,
    }
    assert watermark["expires_at"] is None and watermark["version"] == 1
    assert state["asset"]["name"] == "operator_alpha_orders"


# --- roles ---------------------------------------------------------------------------------------


def test_a_viewer_reads_and_every_write_is_403(http, tokens, asset_ids, key):
    viewer = bearer(tokens["viewer"])
    routes = task_routes(ALPHA, key) + asset_routes(asset_ids["operator_alpha"], key)
    routes.append(("DELETE", f"/assets/{asset_ids['operator_alpha']}/state", {}))
    for method, url, params in routes:
        response = send(http, method, url, params, headers=viewer)
        if method == "GET":
            expect_allowed(response, method, url)
        else:
            message = refused(response, 403, "forbidden")
            assert "permission" in message, message


def test_the_editor_writes_task_state_but_not_asset_state(http, tokens, asset_ids, key):
    editor = bearer(tokens["editor"])
    put = http.put(
        ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, json={"value": [1, "ü"]}, headers=editor
    )
    assert put.status_code == 200 and put.json()["version"] == 1
    stored = http.get(ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, headers=editor).json()
    assert stored["value"] == [1, "ü"] and stored["updated_by_try"] is None
    assert (
        http.delete(ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, headers=editor).status_code
        == 204
    )
    for method, url, params in task_routes(ALPHA, key):
        expect_allowed(send(http, method, url, params, headers=editor), method, url)
    for method, url, params in asset_routes(asset_ids["operator_alpha"], key):
        response = send(http, method, url, params, headers=editor)
        if method == "GET":
            expect_allowed(response, method, url)
        else:
            assert "permission on assets" in refused(response, 403, "forbidden")


def test_ops_write_asset_state(http, tokens, asset_ids, key):
    ops = bearer(tokens["ops"])
    asset_id = asset_ids["operator_beta"]
    for method, url, params in asset_routes(asset_id, key):
        expect_allowed(send(http, method, url, params, headers=ops), method, url)
    # Clearing an asset's state, with the watermark the task wrote put back after.
    entry, watermark_key = f"/assets/{asset_id}/stateEntry", {"key": "watermark"}
    watermark = http.get(entry, params=watermark_key, headers=ops).json()["value"]
    try:
        assert http.delete(f"/assets/{asset_id}/state", headers=ops).status_code == 204
        assert http.get(f"/assets/{asset_id}/state", headers=ops).json()["total_entries"] == 0
    finally:
        http.put(entry, params=watermark_key, json={"value": watermark}, headers=ops)
    assert http.get(entry, params=watermark_key, headers=ops).json()["value"] == watermark


def test_versions_and_increments_on_the_real_server(http, tokens, asset_ids, key):
    """Conditional writes lose to a write in between; concurrent increments lose nothing."""
    ops = bearer(tokens["ops"])
    entry = ti_url(BETA, "submit", "stateEntry")
    try:
        first = http.put(entry, params={"key": key, "if_version": 0}, json={"value": "a"}, headers=ops)
        assert first.status_code == 200 and first.json()["version"] == 1, first.text
        conflict = http.put(entry, params={"key": key, "if_version": 0}, json={"value": "b"}, headers=ops)
        assert conflict.status_code == 409 and conflict.json()["detail"]["stored_version"] == 1, conflict.text
        assert conflict.json()["detail"]["reason"] == "version_conflict"

        def add(url: str) -> None:
            for _ in range(25):
                response = http.post(url, params={"key": key + ".n"}, json={"by": 1}, headers=ops)
                assert response.status_code == 200, response.text

        urls = (
            ti_url(BETA, "submit", "stateIncrement"),
            f"/assets/{asset_ids['operator_beta']}/stateIncrement",
        )
        for url in urls:
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(add, [url] * 4))
        assert http.get(entry, params={"key": key + ".n"}, headers=ops).json()["value"] == 100
        counter = http.get(
            f"/assets/{asset_ids['operator_beta']}/stateEntry", params={"key": key + ".n"}, headers=ops
        )
        assert counter.json()["value"] == 100 and counter.json()["updated_by"]["kind"] == "api"
    finally:
        for url in (entry, f"/assets/{asset_ids['operator_beta']}/stateEntry"):
            for name in (key, key + ".n"):
                http.delete(url, params={"key": name}, headers=ops)


def test_alice_may_read_and_edit_operator_alpha_only(http, tokens, key):
    alice = bearer(tokens["alice"])
    for method, url, params in task_routes(ALPHA, key):
        expect_allowed(send(http, method, url, params, headers=alice), method, url)
    listing = http.get(ti_url(ALPHA, "submit"), headers=alice).json()
    assert (listing["can_edit"], listing["can_delete"]) == (True, True)
    for method, url, params in task_routes(BETA, key):
        message = refused(send(http, method, url, params, headers=alice), 403, "forbidden")
        assert f"DAG {BETA!r}" in message
    # Nothing of beta's changed.
    viewer = bearer(tokens["viewer"])
    job = http.get(
        ti_url(BETA, "submit", "stateEntry"), params={"key": "remote_job_id"}, headers=viewer
    ).json()
    assert job["value"] == "operator_beta-job-001"


# --- credentials ---------------------------------------------------------------------------------


def test_without_a_token_every_route_is_401(http, asset_ids, key):
    routes = task_routes(ALPHA, key) + asset_routes(asset_ids["operator_alpha"], key)
    for method, url, params in routes:
        message = refused(send(http, method, url, params), 401, "unauthenticated")
        assert "Not authenticated" in message


def test_the_ui_cookie_works_like_the_bearer_token(deployment, tokens, key):
    with httpx.Client(base_url=f"{deployment.api_url}/state/api/v1", timeout=30, trust_env=False) as browser:
        browser.cookies.set("_token", tokens["editor"])
        put = browser.put(
            ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, json={"value": "cookie"}
        )
        assert put.status_code == 200, put.text
        entry = ti_url(ALPHA, "submit", "stateEntry")
        assert browser.get(entry, params={"key": key}).json()["value"] == "cookie"
        assert browser.delete(entry, params={"key": key}).status_code == 204
    with httpx.Client(base_url=f"{deployment.api_url}/state/api/v1", timeout=30, trust_env=False) as viewer:
        viewer.cookies.set("_token", tokens["viewer"])
        assert viewer.get(ti_url(ALPHA, "submit")).status_code == 200
        written = viewer.put(ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, json={"value": 1})
        refused(written, 403, "forbidden")


def resigned(token: str, secret: str, **claims: int) -> str:
    """*token*'s claims, with *claims* changed, signed with *secret* as Airflow signs (HS512)."""
    payload = {**jwt.decode(token, options={"verify_signature": False}), **claims}
    return jwt.encode(payload, secret, algorithm="HS512", headers={"kid": "not-used"})


def test_expired_and_forged_tokens_are_refused(http, deployment, tokens):
    secret = deployment.env["AIRFLOW__API_AUTH__JWT_SECRET"]
    url = ti_url(ALPHA, "submit")
    # The control: the same claims signed with the deployment's secret are accepted.
    assert http.get(url, headers=bearer(resigned(tokens["admin"], secret))).status_code == 200
    now = int(time.time())
    expired = resigned(tokens["admin"], secret, iat=now - 7200, nbf=now - 7200, exp=now - 3600)
    assert "Token Expired" in refused(http.get(url, headers=bearer(expired)), 401, "unauthenticated")
    forged = resigned(tokens["admin"], "not-the-deployment-secret-" + "x" * 64)
    assert "not valid" in refused(http.get(url, headers=bearer(forged)), 403, "forbidden")
    unsigned = jwt.encode(
        jwt.decode(tokens["admin"], options={"verify_signature": False}), None, algorithm="none"
    )
    written = http.put(url + "Entry?key=k", json={"value": 1}, headers=bearer(unsigned))
    refused(written, 403, "forbidden")
    refused(http.get(url, headers=bearer("garbage")), 403, "forbidden")


# --- keys and bodies through a real server -------------------------------------------------------


def test_keys_are_query_parameters_only_on_the_real_server(http, tokens):
    editor = bearer(tokens["editor"])
    for raw in ("%FF", "nul%00", ""):
        response = http.get(ti_url(ALPHA, "submit", "stateEntry") + "?key=" + raw, headers=editor)
        refused(response, 422, "invalid_key")
    # The path form of a key is gone.
    assert http.get(ti_url(ALPHA, "submit", "state/k"), headers=editor).status_code in (404, 405)
    # `..` is a key like any other.
    response = http.get(ti_url(ALPHA, "submit", "stateEntry"), params={"key": ".."}, headers=editor)
    refused(response, 404, "key_not_found")


def test_a_huge_body_is_refused_with_413(http, tokens, key):
    editor = {**bearer(tokens["editor"]), "Content-Type": "application/json"}
    body = '{"value": "' + "x" * 200_000 + '"}'
    response = http.put(
        ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, content=body, headers=editor
    )
    refused(response, 413, "body_too_large")
    refused(
        http.get(ti_url(ALPHA, "submit", "stateEntry"), params={"key": key}, headers=editor),
        404,
        "key_not_found",
    )
