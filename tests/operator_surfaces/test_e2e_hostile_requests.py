"""
Requests a hostile page or client can send to the state API, against the real API server of the
operator deployment (conftest.py of this folder, PostgreSQL): cross-origin "simple" requests riding on the
UI's cookie, huge bodies on the unauthenticated handshake routes, and control characters in path
parameters. Each must be refused with the state API's error shape and change nothing.

The deployment is shared with the operator API and UI tests: these tests write keys of their own
(``e2e-hostile/...``) and remove them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import httpx
import psutil
import pytest
from state_testing.deployment import Deployment

ALPHA, BETA, RUN_ID = "operator_alpha", "operator_beta", "first"


@pytest.fixture(scope="module")
def deployment(operator_deployment: Deployment) -> Deployment:
    return operator_deployment


@pytest.fixture(scope="module")
def ops_token(deployment: Deployment) -> str:
    """A user who may write task state and asset state (SimpleAuthManager role `op`)."""
    return deployment.token("ops")


@pytest.fixture(scope="module")
def api(deployment: Deployment) -> Iterator[httpx.Client]:
    """A client of the operators' REST API, with no credentials of its own."""
    with httpx.Client(base_url=f"{deployment.api_url}/state/api/v1", timeout=60, trust_env=False) as client:
        yield client


@pytest.fixture(scope="module")
def alpha_asset(deployment: Deployment) -> int:
    rows = deployment.query("SELECT id FROM asset WHERE name = 'operator_alpha_orders'")
    return int(rows[0]["id"])


@pytest.fixture
def key() -> str:
    return f"e2e-hostile/{uuid.uuid4().hex[:8]}"


def refused(response: httpx.Response, status: int, reason: str) -> str:
    assert response.status_code == status, (response.request.method, response.request.url, response.text)
    body = response.json()
    assert set(body) == {"detail"} and body["detail"]["reason"] == reason, body
    return str(body["detail"]["message"])


# --- 1. cross-origin simple requests with the UI's cookie --------------------------------------

# What a page of another origin can send without a CORS preflight: a form (urlencoded, multipart
# or text/plain) or `fetch(url, {method: "POST", mode: "no-cors", body})`, whose string body goes
# as text/plain. Each carries JSON text, as an attacker would; a content type whose parameters
# mention JSON is still not JSON.
SIMPLE_CONTENT = {
    "text/plain": "text/plain;charset=UTF-8",
    "text/plain naming json": "text/plain; x=application/json",
    "form": "application/x-www-form-urlencoded",
    "multipart": "multipart/form-data; boundary=b",
    "no body, no type": None,
}


def simple_request(cookie_client: httpx.Client, method: str, url: str, params: dict, kind: str, body: str):
    content_type = SIMPLE_CONTENT[kind]
    if content_type is None:
        return cookie_client.request(method, url, params=params)
    if kind == "multipart":
        body = f'--b\r\nContent-Disposition: form-data; name="by"\r\n\r\n{body}\r\n--b--\r\n'
    return cookie_client.request(
        method, url, params=params, content=body, headers={"Content-Type": content_type}
    )


def writes(ti: str, asset: str, key: str) -> list[tuple[str, str, dict, str, str]]:
    """(method, URL, query, JSON body, key written) of every route that writes one key."""
    found = []
    for base in (ti, asset):
        found += [
            ("PUT", f"{base}/stateEntry", {"key": key}, '{"value": "csrf"}', key),
            ("POST", f"{base}/stateIncrement", {"key": key + ".n"}, '{"by": 1000}', key + ".n"),
        ]
    return found


def test_requests_another_origin_can_send_without_preflight_change_no_state(
    deployment, api, ops_token, alpha_asset, key
):
    """
    With the UI's `_token` cookie, every write route refuses a body that is not declared JSON
    (415, saying what to send) and the stored state is unchanged; declared JSON, the same cookie works.
    """
    ops = {"Authorization": f"Bearer {ops_token}"}
    ti = f"/dags/{ALPHA}/dagRuns/{RUN_ID}/taskInstances/submit"
    asset = f"/assets/{alpha_asset}"
    seeded = {}
    try:
        for base in (ti, asset):
            assert api.put(
                f"{base}/stateEntry", params={"key": key}, json={"value": "kept"}, headers=ops
            ).is_success
            assert api.post(
                f"{base}/stateIncrement", params={"key": key + ".n"}, json={"by": 5}, headers=ops
            ).is_success
            seeded[base] = {key: "kept", key + ".n": 5}

        with httpx.Client(base_url=api.base_url, timeout=60, trust_env=False) as browser:
            browser.cookies.set("_token", ops_token)
            for method, url, params, body, _ in writes(ti, asset, key):
                for kind in SIMPLE_CONTENT:
                    response = simple_request(browser, method, url, params, kind, body)
                    message = refused(response, 415, "invalid_request")
                    assert "Content-Type: application/json" in message, message
            for base, expected in seeded.items():
                for name, value in expected.items():
                    stored = api.get(f"{base}/stateEntry", params={"key": name}, headers=ops).json()
                    assert stored["value"] == value, (base, name, stored)

            # The same cookie with JSON declared: written, and an increment without a body adds 1.
            for base in (ti, asset):
                put = browser.put(f"{base}/stateEntry", params={"key": key}, json={"value": "by cookie"})
                assert put.status_code == 200, put.text
                inc = browser.post(f"{base}/stateIncrement", params={"key": key + ".n"}, json={"by": 2})
                assert inc.json()["value"] == 7, inc.text
                bare = browser.post(
                    f"{base}/stateIncrement",
                    params={"key": key + ".n"},
                    headers={"Content-Type": "application/json; charset=utf-8"},
                )
                assert bare.json()["value"] == 8, bare.text
                # DELETE has no body: browsers preflight it cross-origin, and the UI sends it bare.
                assert browser.delete(f"{base}/stateEntry", params={"key": key}).status_code == 204
    finally:
        for base in (ti, asset):
            for name in (key, key + ".n"):
                api.delete(f"{base}/stateEntry", params={"key": name}, headers=ops)


def test_a_bearer_token_needs_no_content_type(api, ops_token, key):
    """A request with an Authorization header is never a simple request: curl's defaults still work."""
    ops = {"Authorization": f"Bearer {ops_token}"}
    entry = f"/dags/{ALPHA}/dagRuns/{RUN_ID}/taskInstances/submit/stateEntry"
    try:
        # curl -d sends application/x-www-form-urlencoded.
        put = api.put(
            entry,
            params={"key": key},
            content='{"value": 1}',
            headers={**ops, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert put.status_code == 200, put.text
    finally:
        api.delete(entry, params={"key": key}, headers=ops)


# --- 2. bounded bodies on the unauthenticated handshake routes ---------------------------------

HUGE = 64 * 1024 * 1024
CHUNK = 64 * 1024


def api_server_rss(deployment: Deployment) -> int:
    """The resident memory of the API server and its worker processes, in bytes."""
    root = psutil.Process(deployment.processes["api-server"].pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with suppress(psutil.Error):
            total += process.memory_info().rss
    return total


@contextmanager
def peak_growth(deployment: Deployment) -> Iterator[list[int]]:
    """Samples the API server's memory while the block runs; yields [growth], filled in at the end."""
    baseline = api_server_rss(deployment)
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], api_server_rss(deployment))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    growth = [0]
    try:
        yield growth
    finally:
        done.set()
        sampler.join()
        growth[0] = max(peak[0], api_server_rss(deployment)) - baseline


def huge_credential_request() -> bytes:
    """A well-formed credential request, padded with an unknown field to 64 MiB."""
    head = b'{"task_instance_id": "%s", "verifier": "%s", "pad": "' % (
        str(uuid.uuid4()).encode(),
        b"v" * 43,
    )
    return head + b"x" * (HUGE - len(head) - 2) + b'"}'


def streamed(body: bytes) -> Iterator[bytes]:
    """The body as a chunked upload: no Content-Length for the server to check first."""
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]


@pytest.mark.parametrize("path", ["/credentials", "/credentials/renew", "/challenges"])
def test_handshake_routes_refuse_a_huge_body_before_reading_it(deployment, path):
    body = huge_credential_request()
    with httpx.Client(base_url=f"{deployment.api_url}/state", timeout=120, trust_env=False) as client:
        for how, content in (("Content-Length", body), ("chunked", streamed(body))):
            started = time.monotonic()
            with peak_growth(deployment) as growth:
                response = client.post(path, content=content, headers={"Content-Type": "application/json"})
            elapsed = time.monotonic() - started
            assert growth[0] < 8 * 1024 * 1024, f"{how}: the API server grew by {growth[0] / 2**20:.0f} MiB"
            assert elapsed < 15, f"{how}: {elapsed:.1f}s"
            message = refused(response, 413, "body_too_large")
            assert "bytes" in message, message
        # A request of the ordinary size is still answered as before.
        if path == "/credentials":
            ordinary = {"task_instance_id": str(uuid.uuid4()), "verifier": "v" * 43}
            assert "does not exist" in refused(client.post(path, json=ordinary), 403, "forbidden")
        elif path == "/credentials/renew":
            refused(client.post(path, json={}), 401, "invalid_token")
        else:  # the first step of 0.4's handshake, retired: 410 saying to upgrade
            refused(client.post(path, json={"task_instance_id": str(uuid.uuid4())}), 410, "invalid_request")


# --- 3. control characters in path parameters ----------------------------------------------------

CONTROL = ("%00", "%01", "%09", "%0D", "%1F", "%7F", "%C2%85")
# Airflow mounts the state app at /state with a pattern that no newline matches: a path holding one
# gets Airflow's own 404 and never reaches the state app.
NEVER_REACHES_US = ("%0A",)


def test_control_characters_in_path_parameters_are_refused(deployment, api, ops_token, alpha_asset):
    """
    A NUL reached PostgreSQL through Airflow's own access check (500); every control character in
    a DAG, run, task or asset id is refused first, whichever route, with or without a token.
    """
    ops = {"Authorization": f"Bearer {ops_token}"}
    for char in CONTROL:
        dag, run, task = f"/dags/{BETA}{char}", f"/dagRuns/{RUN_ID}{char}", f"/taskInstances/submit{char}"
        good_dag, good_run, good_task = f"/dags/{BETA}", f"/dagRuns/{RUN_ID}", "/taskInstances/submit"
        urls = [
            ("GET", f"{dag}{good_run}/state"),
            ("GET", f"{good_dag}{run}/state"),
            ("GET", f"{dag}{good_run}{good_task}/state"),
            ("DELETE", f"{good_dag}{run}{good_task}/state"),
            ("GET", f"{good_dag}{good_run}{task}/stateEntry?key=k"),
            ("PUT", f"{dag}{good_run}{good_task}/stateEntry?key=k"),
            ("DELETE", f"{good_dag}{good_run}{task}/stateEntry?key=k"),
            ("POST", f"{good_dag}{run}{good_task}/stateIncrement?key=k"),
            ("GET", f"/assets/{alpha_asset}{char}/state"),
            ("PUT", f"/assets/{alpha_asset}{char}/stateEntry?key=k"),
        ]
        for method, url in urls:
            for headers in (ops, {}):
                response = api.request(
                    method, url, json={"value": 1} if method == "PUT" else None, headers=headers
                )
                message = refused(response, 422, "invalid_request")
                assert "control character" in message, message
    for char in NEVER_REACHES_US:
        assert api.get(f"/dags/{BETA}{char}/dagRuns/{RUN_ID}/state", headers=ops).status_code == 404
    # The task API's path parameter, without a credential.
    task_api = httpx.post(
        f"{deployment.api_url}/state/task-instances/{uuid.uuid4()}%00/increment?key=k", json={}, timeout=30
    )
    refused(task_api, 422, "invalid_request")
