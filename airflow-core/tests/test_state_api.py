"""The state API's rules, checked over HTTP against real task instances in the database of the run."""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest
from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential
from airflow_task_state.api.signing_keys import forget_configured_keys, signing_key
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from state_testing.airflow_cli import run_airflow

SESSION_KEY = "a-test-session-key-" + "x" * 50
TEST_DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="module")
def exercise_ti() -> Iterator[TaskInstanceClaims]:
    """A real task instance (from a real `airflow dags test` run), as a token would name it."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
        run_airflow("dags", "reserialize")
        run_airflow("dags", "test", "state_api_surface")
        with create_session() as session:
            ti = session.scalars(
                select(TaskInstance)
                .where(TaskInstance.dag_id == "state_api_surface", TaskInstance.task_id == "exercise")
                .order_by(TaskInstance.start_date.desc())
            ).first()
            claims = TaskInstanceClaims(
                str(ti.id), ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
            )
        yield claims


def set_ti_state(claims: TaskInstanceClaims, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(update(TaskInstance).where(TaskInstance.id == UUID(claims.ti_id)).values(state=state))


@pytest.fixture
def running(exercise_ti):
    set_ti_state(exercise_ti, "running")
    yield exercise_ti
    set_ti_state(exercise_ti, "success")


@pytest.fixture
def session_key(monkeypatch) -> Iterator[str]:
    """The API server's credential key, dedicated ([state] session_key); read afresh by each test."""
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", SESSION_KEY)
    forget_configured_keys()
    yield SESSION_KEY
    forget_configured_keys()


@pytest.fixture
def api(session_key):
    from airflow_task_state.api.app import create_app

    with TestClient(create_app()) as client:
        yield client


def auth(claims: TaskInstanceClaims, key: bytes | None = None, now: float | None = None) -> dict[str, str]:
    """The header of a credential as the API server issues it (after a handshake)."""
    return {"Authorization": f"Bearer {issue_credential(claims, key or signing_key(), now)}"}


def at(claims: TaskInstanceClaims, key: str = "k", ti_id: str | None = None) -> dict:
    """The URL and query of one key of a task instance's state, as keyword arguments for a request."""
    return {"url": f"/task-instances/{ti_id or claims.ti_id}/value", "params": {"key": key}}


def keys_url(claims: TaskInstanceClaims) -> str:
    return f"/task-instances/{claims.ti_id}/keys"


def detail(response) -> dict:
    return response.json()["detail"]


def test_round_trip_list_delete_clear(api, running):
    headers = auth(running)
    written = api.put(**at(running, "job"), json={"value": {"id": "app_001"}}, headers=headers)
    assert written.status_code == 200 and written.json()["key"] == "job"
    assert api.put(**at(running, "n"), json={"value": 3}, headers=headers).status_code == 200
    assert api.get(**at(running, "job"), headers=headers).json() == {
        "key": "job",
        "value": {"id": "app_001"},
        "version": written.json()["version"],
    }
    # "kept" was written by the task itself during its run.
    assert api.get(keys_url(running), headers=headers).json()["keys"] == [
        "job",
        "kept",
        "n",
    ]
    assert api.delete(**at(running, "job"), headers=headers).status_code == 204
    missing = api.get(**at(running, "job"), headers=headers)
    assert missing.status_code == 404 and detail(missing) == {
        "reason": "key_not_found",
        "message": "no state under key 'job'",
    }
    assert api.delete(keys_url(running), headers=headers).status_code == 204
    assert api.get(keys_url(running), headers=headers).json()["keys"] == []


def test_a_running_trys_writes_look_for_no_discard_a_clear_left(api, running):
    """
    Its first touch applied that discard before it got its credential, and a try cleared since may
    not write: looking again (the archived tries, then the task instances and their rendered fields)
    would cost every set, increment and delete up to three queries.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    sent: list[str] = []

    def record(conn, cursor, statement, *args):
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        headers = auth(running)
        assert api.put(**at(running, "n"), json={"value": 1}, headers=headers).status_code == 200
        increment = f"/task-instances/{running.ti_id}/increment"
        assert api.post(increment, params={"key": "n"}, headers=headers).status_code == 200
        assert api.delete(**at(running, "n"), headers=headers).status_code == 204
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert not [statement for statement in sent if "task_instance_history" in statement], sent


@pytest.mark.parametrize(
    ("method", "path", "field", "stored_after"),
    [("PUT", "value", "value", 2), ("POST", "increment", "by", 3)],
)
def test_a_running_trys_write_checks_its_try_in_the_writes_own_statement(
    api, running, method, path, field, stored_after
):
    """
    Once a request of the try has checked it, the try's set or increment is one statement, which
    finds the try still running itself; a try that has ended since is refused with its reason, and
    nothing written.
    """
    from test_metastore import autocommit_statements

    headers, key = auth(running), f"checked-in-its-{path}-statement"

    def write(number: int):
        url = f"/task-instances/{running.ti_id}/{path}"
        return api.request(method, url, params={"key": key}, json={field: number}, headers=headers)

    def version() -> int:
        return api.get(**at(running, key), headers=headers).json()["version"]

    assert write(1).status_code == 200
    first = version()
    with autocommit_statements() as sent:
        assert write(2).status_code == 200
    assert len(sent) == 1 and "task_instance" in sent[0], sent
    assert version() == first + 1
    set_ti_state(running, "success")
    ended = write(3)
    assert ended.status_code == 403 and detail(ended)["reason"] == "not_running"
    assert api.get(**at(running, key), headers=headers).json()["value"] == stored_after


def test_writes_record_the_try(api, running, backend):
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import TaskStateModel

    api.put(**at(running, "tried"), json={"value": 1}, headers=auth(running))
    with create_session() as session:
        tried = session.scalar(
            select(TaskStateModel.updated_by_try).where(
                TaskStateModel.run_id == running.run_id, TaskStateModel.key == "tried"
            )
        )
    assert tried == running.try_number


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ],
    ids=["none", "garbage", "not-bearer"],
)
def test_requests_without_a_valid_token_are_401(api, exercise_ti, headers):
    assert api.get(**at(exercise_ti), headers=headers).status_code == 401


def test_wrong_key_and_expired_credentials_are_401(api, exercise_ti):
    wrong = api.get(**at(exercise_ti), headers=auth(exercise_ti, key=b"another-key-" + b"y" * 40))
    assert wrong.status_code == 401 and "signature verification failed" in detail(wrong)["message"]
    expired = api.get(**at(exercise_ti), headers=auth(exercise_ti, now=time.time() - 3600))
    assert expired.status_code == 401 and detail(expired) == {
        "reason": "invalid_token",
        "message": "credential expired",
    }


def signed_with_the_servers_key(claims: TaskInstanceClaims, **overrides) -> dict[str, str]:
    """A credential as someone holding the server's key could shape it, every claim chosen by hand."""
    import jwt

    now = int(time.time())
    payload = {
        **dataclasses.asdict(claims),
        "sub": claims.ti_id,
        "aud": "airflow-task-state",
        "iat": now,
        "exp": now + 60,
        **overrides,
    }
    return {"Authorization": f"Bearer {jwt.encode(payload, signing_key(), algorithm='HS256')}"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"exp": int(time.time()) + 10 * 365 * 86400}, "lives longer than the 600 s"),
        ({"iat": int(time.time()) - 5 * 365 * 86400}, "lives longer than the 600 s"),
        (
            {"iat": int(time.time()) - 5 * 365 * 86400, "exp": int(time.time()) - 5 * 365 * 86400 + 600},
            "expired",
        ),
        ({"iat": int(time.time()) + 3600, "exp": int(time.time()) + 3700}, "issued in the future"),
        ({"aud": "airflow-task-state:other"}, "Audience"),
        ({"sub": "someone-else"}, "subject"),
    ],
    ids=["exp-in-10-years", "iat-5-years-ago", "old-but-short", "future-iat", "other-audience", "sub"],
)
def test_the_server_caps_what_a_credential_says_about_itself(api, running, overrides, message):
    response = api.get(**at(running), headers=signed_with_the_servers_key(running, **overrides))
    assert response.status_code == 401 and detail(response)["reason"] == "invalid_token"
    assert message in detail(response)["message"]


def test_an_airflow_execution_token_is_not_a_state_credential(api, running, monkeypatch):
    """The API server's own JWT key signs Airflow's task tokens; the state API derives a key of its own."""
    import jwt

    jwt_secret = "airflow-jwt-secret-" + "z" * 60
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", jwt_secret)
    forget_configured_keys()
    assert signing_key() not in (jwt_secret.encode(), SESSION_KEY.encode())
    now = int(time.time())
    airflow_like = jwt.encode(
        {
            **dataclasses.asdict(running),
            "sub": running.ti_id,
            "aud": "airflow-task-state",
            "iat": now,
            "exp": now + 60,
        },
        jwt_secret,
        algorithm="HS256",
    )
    refused = api.get(**at(running), headers={"Authorization": f"Bearer {airflow_like}"})
    assert refused.status_code == 401
    assert api.get(**at(running), headers=auth(running)).status_code in (200, 404)


def test_server_without_any_key_says_what_to_set(monkeypatch, exercise_ti):
    from airflow_task_state.api.app import create_app

    for option in ("STATE__SESSION_KEY", "API_AUTH__JWT_SECRET", "API_AUTH__JWT_PRIVATE_KEY_PATH"):
        monkeypatch.setenv(f"AIRFLOW__{option}", "")
    forget_configured_keys()
    headers = {"Authorization": "Bearer anything"}
    with TestClient(create_app()) as client:
        response = client.get(**at(exercise_ti), headers=headers)
        renewal = client.post("/credentials/renew", headers=headers)
    for refused in (response, renewal):
        assert refused.status_code == 503 and detail(refused)["reason"] == "misconfigured"
        assert "Set [state] session_key" in detail(refused)["message"]
    forget_configured_keys()


def test_a_credential_cannot_reach_another_task_instance(api, running):
    other = "01234567-89ab-7def-8123-456789abcdef"
    for method in ("GET", "PUT", "DELETE"):
        response = api.request(method, **at(running, ti_id=other), json={"value": 1}, headers=auth(running))
        assert response.status_code == 403, method
    forged = dataclasses.replace(running, task_id="some_other_task")
    assert api.get(**at(forged), headers=auth(forged)).status_code == 403
    unknown = dataclasses.replace(running, ti_id=other)
    assert api.get(**at(unknown), headers=auth(unknown)).status_code == 403


def test_only_the_running_try_may_write_and_another_try_not_even_read(api, running):
    other_try = dataclasses.replace(running, try_number=running.try_number + 1)
    for method in ("GET", "PUT", "DELETE"):
        refused = api.request(method, **at(other_try), json={"value": 1}, headers=auth(other_try))
        assert refused.status_code == 403 and detail(refused)["reason"] == "forbidden", method
        assert "does not match" in detail(refused)["message"]
    set_ti_state(running, "success")
    ended = api.put(**at(running), json={"value": 1}, headers=auth(running))
    assert ended.status_code == 403 and detail(ended)["reason"] == "not_running"
    assert "only a running try" in detail(ended)["message"]
    assert api.delete(**at(running), headers=auth(running)).status_code == 403
    # Its callbacks may still read, with the credential it holds, for what is left of its lifetime.
    assert api.get(**at(running), headers=auth(running)).status_code in (200, 404)


@pytest.mark.parametrize(
    "body",
    [
        '{"value": null}',
        '{"value": NaN}',
        '{"value": [1, Infinity]}',
        '{"value": "\\ud800"}',
        "{}",
        "not json",
    ],
    ids=["null", "nan", "infinity", "lone-surrogate", "no-value", "not-json"],
)
def test_invalid_values_are_422_and_nothing_is_written(api, running, body):
    headers = {**auth(running), "Content-Type": "application/json"}
    api.put(**at(running, "kept"), json={"value": "original"}, headers=headers)
    assert api.put(**at(running, "kept"), content=body, headers=headers).status_code == 422
    assert api.get(**at(running, "kept"), headers=headers).json()["value"] == "original"


def test_unstorable_keys_and_too_large_values_are_422(api, running, monkeypatch):
    headers = auth(running)
    assert api.put(**at(running, "k" * 513), json={"value": 1}, headers=headers).status_code == 422
    nul_key = api.put(**at(running, "nul\x00key"), json={"value": 1}, headers=headers)
    assert nul_key.status_code == 422 and "NUL" in detail(nul_key)["message"]
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "16")
    too_large = api.put(**at(running), json={"value": "x" * 20}, headers=headers)
    assert too_large.status_code == 422 and "max_value_bytes" in detail(too_large)["message"]


def test_asset_state_only_for_declared_assets_and_writes_only_for_outlets(api, running):
    headers = auth(running)
    by_name = {"name": "state_tests_declared"}
    by_uri = {"uri": "file:///tmp/state-tests/declared"}
    key = {"key": "watermark"}
    assert (
        api.put("/assets/value", params={**by_name, **key}, json={"value": 41}, headers=headers).status_code
        == 200
    )
    assert api.get("/assets/value", params={**by_uri, **key}, headers=headers).json()["value"] == 41
    assert api.get("/assets/keys", params=by_name, headers=headers).json()["keys"] == ["watermark"]
    other = api.get("/assets/value", params={"name": "state_tests_undeclared", **key}, headers=headers)
    assert other.status_code == 403 and detail(other)["reason"] == "asset_not_declared"
    assert "does not declare" in detail(other)["message"]
    inlet = {"name": "state_tests_inlet_only"}
    assert api.get("/assets/keys", params=inlet, headers=headers).status_code == 200
    for method in ("PUT", "DELETE"):
        written = api.request(
            method, "/assets/value", params={**inlet, **key}, json={"value": 1}, headers=headers
        )
        assert written.status_code == 403 and detail(written)["reason"] == "asset_not_declared", method
        assert "as an inlet only" in detail(written)["message"]
    assert api.delete("/assets/keys", params=inlet, headers=headers).status_code == 403
    unknown = api.get("/assets/value", params={"name": "no-such-asset", **key}, headers=headers)
    assert unknown.status_code == 404 and detail(unknown)["reason"] == "asset_not_found"
    assert api.get("/assets/value", params=key, headers=headers).status_code == 422


def test_openapi_schema_describes_the_routes(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/task-instances/{task_instance_id}/value", "/task-instances/{task_instance_id}/keys"} <= set(
        paths
    )
    put = paths["/task-instances/{task_instance_id}/value"]["put"]
    assert "403" in put["responses"] and "413" in put["responses"]
    assert put["requestBody"]["content"]["application/json"]["schema"]["required"] == ["value"]
    assert sorted(p["name"] for p in put["parameters"] if p["in"] == "query") == ["if_version", "key"]
    # The handshake, with the bodies it takes and the refusals it answers.
    for path in ("/credentials", "/credentials/renew"):
        assert {"401", "403", "413", "503"} <= set(paths[path]["post"]["responses"]), path
    # 0.4's first step answers 410 and is left out of the schema.
    assert "/challenges" not in paths
    redeem = paths["/credentials"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert redeem["$ref"].endswith("/CredentialRequest")


# --- keys travel in a query parameter, read strictly: no key can pick another operation ------


def test_every_corpus_key_round_trips_and_deleting_one_touches_no_other(api, running):
    from test_task_state_in_process import load_corpus

    corpus = load_corpus().CORPUS
    headers = auth(running)
    api.delete(keys_url(running), headers=headers)
    for i, key in enumerate(corpus):
        assert api.put(**at(running, key), json={"value": i}, headers=headers).status_code == 200, key
    for i, key in enumerate(corpus):
        assert api.get(**at(running, key), headers=headers).json() == {"key": key, "value": i, "version": 1}
    assert api.get(keys_url(running), headers=headers).json()["keys"] == sorted(corpus)
    for gone, key in enumerate(corpus, start=1):
        assert api.delete(**at(running, key), headers=headers).status_code == 204
        assert api.get(keys_url(running), headers=headers).json()["keys"] == sorted(corpus[gone:])


def test_a_request_without_a_key_is_refused_and_clears_nothing(api, running):
    headers = auth(running)
    api.put(**at(running, "survivor"), json={"value": 1}, headers=headers)
    for method in ("GET", "PUT", "DELETE"):
        response = api.request(
            method, f"/task-instances/{running.ti_id}/value", json={"value": 2}, headers=headers
        )
        assert response.status_code == 422 and detail(response)["reason"] == "invalid_request", method
    assert api.get(**at(running, "survivor"), headers=headers).json()["value"] == 1


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("key=%FF%FE", "not valid UTF-8"),
        ("key=%ED%A0%80", "not valid UTF-8"),  # a lone surrogate, encoded as UTF-8 would
        ("key=a&key=b", "give the key parameter once"),
        ("key=", "must not be empty"),
        ("key=nul%00", "NUL"),
    ],
    ids=["invalid-utf8", "surrogate", "twice", "empty", "nul"],
)
def test_malformed_keys_are_refused_not_rewritten(api, running, query, message):
    headers = auth(running)
    url = f"/task-instances/{running.ti_id}/value?{query}"
    before = api.get(keys_url(running), headers=headers).json()["keys"]
    response = api.put(url, json={"value": 1}, headers=headers)
    assert response.status_code == 422 and detail(response)["reason"] == "invalid_key"
    assert message in detail(response)["message"]
    assert api.get(keys_url(running), headers=headers).json()["keys"] == before


def test_bodies_are_read_only_for_a_valid_token_and_never_past_the_limit(api, running, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    body = '{"value": "' + "x" * 5000 + '"}'
    unauthenticated = api.put(**at(running), content=body, headers={"Content-Type": "application/json"})
    assert unauthenticated.status_code == 401
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        too_large = api.put(**at(running), content=body, headers=auth(running))
    assert too_large.status_code == 413 and detail(too_large)["reason"] == "body_too_large"
    # A refusal is no reason for a DeprecationWarning in the log of every task that sees one.
    assert [str(w.message) for w in warned if issubclass(w.category, DeprecationWarning)] == []
    # Without a Content-Length (a chunked upload), the stream is cut at the limit all the same.
    streamed = api.put(
        **at(running), content=iter([body.encode()[:3000], body.encode()[3000:]]), headers=auth(running)
    )
    assert streamed.status_code == 413
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        extra = api.put(**at(running), content='{"value": 1, "other": 2}', headers=auth(running))
    assert extra.status_code == 422 and detail(extra)["reason"] == "invalid_value"
    assert [str(w.message) for w in warned if issubclass(w.category, DeprecationWarning)] == []


def test_a_database_restart_is_a_503_the_client_retries_never_a_500(api, running, db_kind):
    """While PostgreSQL restarts, the API answers 503 `database_unavailable`; after, 200 again."""
    if db_kind != "postgres":
        pytest.skip("restarts the PostgreSQL server of the run: use --db postgres")
    headers = auth(running)
    api.put(**at(running, "through_restart"), json={"value": 1}, headers=headers)
    answers, back_at = steadily_through_a_restart(
        lambda number: api.get(**at(running, "through_restart"), headers=headers)
    )
    assert_unavailable_only_while_down(answers, back_at)


def steadily_through_a_restart(send: Callable[[int], Any]) -> tuple[list[tuple[float, int, Any]], float]:
    """
    *send*(n) for n = 0, 1, ... every 10 ms, from before the run's PostgreSQL restarts (immediate
    mode) to a second after it is back: (when sent, n, response) of each, and when it was back.
    """
    import threading

    from state_testing import dbservers

    answers: list[tuple[float, int, Any]] = []
    stop = threading.Event()

    def send_steadily() -> None:
        number = 0
        while not stop.is_set():
            started = time.monotonic()
            answers.append((started, number, send(number)))
            number += 1
            time.sleep(0.01)

    sender = threading.Thread(target=send_steadily)
    sender.start()
    time.sleep(0.3)
    dbservers.restart_postgres(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], mode="immediate")
    back_at = time.monotonic()
    time.sleep(1.0)
    stop.set()
    sender.join()
    return answers, back_at


def assert_unavailable_only_while_down(answers: list[tuple[float, int, Any]], back_at: float) -> None:
    """200 or 503 `database_unavailable` while the server was down, never a 500; 200 once it was back."""
    codes = {response.status_code for _, _, response in answers}
    assert codes <= {200, 503}, [r.text for _, _, r in answers if r.status_code not in (200, 503)][:3]
    assert 503 in codes, "no request met the restart: the test did not test anything"
    refused = [response for _, _, response in answers if response.status_code == 503]
    assert all(detail(response)["reason"] == "database_unavailable" for response in refused)
    assert all(response.status_code == 200 for started, _, response in answers if started > back_at)


def test_the_client_raises_one_class_per_refusal(api, running, monkeypatch):
    """Real refusals of the app, as the task's client reads them: by `reason`, one class each."""
    from airflow_task_state import (
        InvalidStateError,
        StateAccessDeniedError,
        StateConfigurationError,
        StateUnavailableError,
    )
    from airflow_task_state.worker.client import _checked

    headers = auth(running)
    undeclared = api.get(
        "/assets/value", params={"name": "state_tests_undeclared", "key": "k"}, headers=headers
    )
    other = "01234567-89ab-7def-8123-456789abcdef"
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "16")
    set_ti_state(running, "success")
    not_running = api.put(**at(running), json={"value": 1}, headers=headers)
    set_ti_state(running, "running")
    refusals = {
        "asset_not_declared": (undeclared, StateAccessDeniedError),
        "not_running": (not_running, StateAccessDeniedError),
        "forbidden": (api.get(**at(running, ti_id=other), headers=headers), StateAccessDeniedError),
        "invalid_key": (
            api.put(**at(running, "k" * 513), json={"value": 1}, headers=headers),
            InvalidStateError,
        ),
        "invalid_value": (
            api.put(**at(running), json={"value": "x" * 20}, headers=headers),
            InvalidStateError,
        ),
        "body_too_large": (
            api.put(**at(running), content='{"value": "' + "x" * 5000 + '"}', headers=headers),
            InvalidStateError,
        ),
        "invalid_token": (
            api.get(**at(running), headers={"Authorization": "Bearer x"}),
            StateUnavailableError,
        ),
    }
    for reason, (response, expected) in refusals.items():
        assert detail(response)["reason"] == reason
        with pytest.raises(expected) as raised:
            _checked(response)
        assert type(raised.value) is expected, reason
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "")
    forget_configured_keys()
    misconfigured = api.get(**at(running), headers=headers)
    assert detail(misconfigured)["reason"] == "misconfigured"
    with pytest.raises(StateConfigurationError):
        _checked(misconfigured)
    with pytest.raises(PermissionError):  # what task code written before the classes still catches
        _checked(undeclared)


# --- versions, expiry, increments -----------------------------------------------------


def _stored_expiry(claims: TaskInstanceClaims, key: str):
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import TaskStateModel

    with create_session() as session:
        return session.scalar(
            select(TaskStateModel.expires_at).where(
                TaskStateModel.run_id == claims.run_id,
                TaskStateModel.task_id == claims.task_id,
                TaskStateModel.key == key,
            )
        )


def _close_to(when, seconds: float) -> bool:
    from datetime import UTC, datetime

    if when.tzinfo is None:  # SQLite and MariaDB hand back naive UTC
        when = when.replace(tzinfo=UTC)
    return abs((when - datetime.now(UTC)).total_seconds() - seconds) < 60


def test_ttl_never_and_the_default_retention(api, running, monkeypatch):
    headers = auth(running)
    assert api.put(**at(running, "ttl"), json={"value": 1, "ttl": 3600}, headers=headers).status_code == 200
    assert _close_to(_stored_expiry(running, "ttl"), 3600)
    api.put(**at(running, "never"), json={"value": 1, "ttl": "never"}, headers=headers)
    assert _stored_expiry(running, "never") is None
    # No ttl: [state] default_task_retention, 30 days unless configured; 0 turns it off.
    api.put(**at(running, "default"), json={"value": 1}, headers=headers)
    assert _close_to(_stored_expiry(running, "default"), 30 * 86400)
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "0")
    api.put(**at(running, "default"), json={"value": 2}, headers=headers)
    assert _stored_expiry(running, "default") is None
    # Each write replaces the expiry.
    api.put(**at(running, "ttl"), json={"value": 2, "ttl": "never"}, headers=headers)
    assert _stored_expiry(running, "ttl") is None


@pytest.mark.parametrize(
    "body",
    [
        {"value": 1, "ttl": 0},
        {"value": 1, "ttl": -5},
        {"value": 1, "ttl": "forever"},
        {"value": 1, "ttl": True},
        {"value": 1, "ttl": 1e300},
    ],
    ids=["zero", "negative", "text", "bool", "overflow"],
)
def test_bad_ttls_are_422_and_nothing_is_written(api, running, body):
    headers = auth(running)
    api.put(**at(running, "kept"), json={"value": "original"}, headers=headers)
    refused = api.put(**at(running, "kept"), json=body, headers=headers)
    assert refused.status_code == 422 and detail(refused)["reason"] == "invalid_request", refused.text
    assert "ttl must be" in detail(refused)["message"] or "too long" in detail(refused)["message"]
    assert api.get(**at(running, "kept"), headers=headers).json()["value"] == "original"


def test_unknown_body_fields_are_refused_not_ignored(api, running):
    headers = auth(running)
    api.put(**at(running, "kept"), json={"value": "original"}, headers=headers)
    for body in ({"value": 1, "expires": 60}, {"value": 1, "ttl": 60, "if_version": 0}):
        refused = api.put(**at(running, "kept"), json=body, headers=headers)
        assert refused.status_code == 422 and detail(refused)["reason"] == "invalid_value", body
        assert "unknown:" in detail(refused)["message"]
    assert api.get(**at(running, "kept"), headers=headers).json()["value"] == "original"


def test_conditional_writes_answer_409_with_the_stored_version(api, running):
    from airflow_task_state import StateConflictError
    from airflow_task_state.worker.client import _checked

    headers = auth(running)
    api.delete(**at(running, "cas"), headers=headers)

    def put(value, if_version):
        return api.put(
            at(running)["url"],
            params={"key": "cas", "if_version": if_version},
            json={"value": value},
            headers=headers,
        )

    created = put("a", 0)
    assert created.status_code == 200 and created.json() == {"key": "cas", "version": 1}
    lost = put("b", 0)
    assert lost.status_code == 409
    assert detail(lost)["reason"] == "version_conflict" and detail(lost)["stored_version"] == 1
    assert put("b", 1).json()["version"] == 2
    stale = put("c", 1)
    assert stale.status_code == 409 and detail(stale)["stored_version"] == 2
    assert api.get(**at(running, "cas"), headers=headers).json() == {"key": "cas", "value": "b", "version": 2}
    # The task's client turns the 409 into the error task code catches, with what it needs.
    with pytest.raises(StateConflictError) as raised:
        _checked(stale)
    assert (raised.value.key, raised.value.expected, raised.value.stored) == ("cas", 1, 2)
    for bad in ("-1", "x", "1.5"):
        refused = put("d", bad)
        assert refused.status_code == 422 and detail(refused)["reason"] == "invalid_request", bad


def test_increment_is_atomic_and_refuses_what_is_not_an_integer(api, running):
    headers = auth(running)
    url = f"/task-instances/{running.ti_id}/increment"
    api.delete(**at(running, "rows"), headers=headers)
    assert api.post(url, params={"key": "rows"}, json={}, headers=headers).json() == {
        "key": "rows",
        "value": 1,
    }
    assert api.post(url, params={"key": "rows"}, json={"by": 41}, headers=headers).json()["value"] == 42
    assert api.post(url, params={"key": "rows"}, json={"by": -2}, headers=headers).json()["value"] == 40
    assert api.get(**at(running, "rows"), headers=headers).json()["value"] == 40
    api.put(**at(running, "text"), json={"value": "forty"}, headers=headers)
    refused = api.post(url, params={"key": "text"}, json={"by": 1}, headers=headers)
    assert refused.status_code == 422 and detail(refused)["reason"] == "invalid_value"
    assert "not an integer" in detail(refused)["message"]
    assert api.get(**at(running, "text"), headers=headers).json()["value"] == "forty"
    extra = api.post(url, params={"key": "rows"}, json={"by": 1, "extra": 1}, headers=headers)
    assert extra.status_code == 422 and "unknown: extra" in detail(extra)["message"]
    for body in ({"by": "1"}, {"by": 1.5}, {"by": True}, {"by": 2**63}):
        bad = api.post(url, params={"key": "rows"}, json=body, headers=headers)
        assert bad.status_code == 422 and detail(bad)["reason"] == "invalid_request", body
    assert api.get(**at(running, "rows"), headers=headers).json()["value"] == 40
    # An empty body adds 1, as on the operators' API.
    assert api.post(url, params={"key": "rows"}, headers=headers).json() == {"key": "rows", "value": 41}
    set_ti_state(running, "success")
    ended = api.post(url, params={"key": "rows"}, json={}, headers=headers)
    set_ti_state(running, "running")
    assert ended.status_code == 403 and detail(ended)["reason"] == "not_running"


def test_an_increment_whose_reply_from_the_database_is_lost_is_a_503_and_never_applied_twice(
    api, running, db_kind, monkeypatch
):
    """The server does not send it again, says the outcome is unknown, and the client does not retry."""

    import httpx
    from airflow_task_state import StateUnavailableError
    from airflow_task_state.worker.client import StateClient
    from state_testing.proxy import autocommit_engine_through_a_proxy

    if db_kind == "sqlite":
        pytest.skip("SQLite has no connection to lose")
    headers = auth(running)
    url = f"/task-instances/{running.ti_id}/increment"
    api.delete(**at(running, "lost"), headers=headers)
    with autocommit_engine_through_a_proxy() as proxy:
        assert api.post(url, params={"key": "lost"}, json={"by": 1}, headers=headers).json()["value"] == 1
        proxy.arm(b"task_state")
        lost = api.post(url, params={"key": "lost"}, json={"by": 5}, headers=headers)
        assert proxy.dropped.is_set()
    assert lost.status_code == 503 and detail(lost)["reason"] == "database_unavailable"
    assert "may or may not have been applied" in detail(lost)["message"]
    assert api.get(**at(running, "lost"), headers=headers).json()["value"] == 6

    # The task's client, given that answer to its increment, raises at once rather than retrying.
    sent = []

    def answer(self, request, **kwargs):
        sent.append(request.method)
        return httpx.Response(lost.status_code, json=lost.json(), request=request)

    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://state.invalid/state")
    monkeypatch.setattr(httpx.Client, "send", answer)
    with pytest.raises(StateUnavailableError, match="may or may not have been applied"):
        StateClient(SimpleNamespace(id=running.ti_id))._send("POST", url, idempotent=False)
    assert sent == ["POST"]


def test_asset_writes_record_the_task_try_that_wrote(api, running, backend):
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from airflow_shared.state import AssetScope, StateWriter

    headers = auth(running)
    params = {"name": "state_tests_declared", "key": "counted"}
    api.delete("/assets/value", params=params, headers=headers)
    assert api.post("/assets/increment", params=params, json={"by": 3}, headers=headers).json()["value"] == 3
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == "state_tests_declared"))
    [entry] = backend.entries(AssetScope(asset_id), key_prefix="counted").entries
    assert entry.writer == StateWriter.task_try(
        running.dag_id, running.run_id, running.task_id, running.map_index, running.try_number
    )
    assert entry.expires_at is None  # asset state never expires unless asked
    inlet = api.post(
        "/assets/increment", params={**params, "name": "state_tests_inlet_only"}, json={}, headers=headers
    )
    assert inlet.status_code == 403 and detail(inlet)["reason"] == "asset_not_declared"


@pytest.fixture
def plain_backend(monkeypatch):
    """[state] backend: a minimal BaseStateBackend that stores in a dict and supports nothing more."""
    from airflow_shared.state import BaseStateBackend
    from airflow_task_state import configured_backend

    class DictBackend(BaseStateBackend):
        def __init__(self):
            self.data: dict = {}

        def get(self, scope, key, *, session=None):
            return self.data.get((scope, key))

        def set(self, scope, key, value, *, session=None):
            self.data[(scope, key)] = value

        def delete(self, scope, key, *, session=None):
            self.data.pop((scope, key), None)

        def clear(self, scope, *, all_map_indices=False, session=None):
            self.data = {k: v for k, v in self.data.items() if k[0] != scope}

    instance = DictBackend()
    monkeypatch.setattr(configured_backend, "_instance", instance)
    return instance


def test_a_backend_without_capabilities_answers_501_and_skips_only_the_default_retention(
    api, running, plain_backend, caplog
):
    from airflow_task_state import StateUnsupportedError
    from airflow_task_state.worker.client import _checked

    headers = auth(running)
    # No ttl: the default retention cannot apply, and that is no reason to refuse the write.
    plain = api.put(**at(running, "plain"), json={"value": 1}, headers=headers)
    assert plain.status_code == 200 and plain.json() == {"key": "plain", "version": None}
    assert "default_task_retention is not applied" in caplog.text
    assert api.get(**at(running, "plain"), headers=headers).json() == {
        "key": "plain",
        "value": 1,
        "version": None,
    }
    assert (
        api.put(**at(running, "never"), json={"value": 1, "ttl": "never"}, headers=headers).status_code == 200
    )
    refused = {
        "ttl": api.put(**at(running, "x"), json={"value": 1, "ttl": 60}, headers=headers),
        "if_version": api.put(
            at(running)["url"], params={"key": "x", "if_version": 0}, json={"value": 1}, headers=headers
        ),
        "increment": api.post(
            f"/task-instances/{running.ti_id}/increment", params={"key": "n"}, json={}, headers=headers
        ),
    }
    for asked, response in refused.items():
        assert response.status_code == 501 and detail(response)["reason"] == "unsupported", asked
        assert "DictBackend does not support" in detail(response)["message"], asked
        with pytest.raises(StateUnsupportedError):
            _checked(response)
    assert sorted(key for _, key in plain_backend.data) == ["never", "plain"]


def test_the_succeeded_route_clears_only_a_succeeded_try_of_its_own_task_instance(api, running):
    headers = auth(running)
    url = f"/task-instances/{running.ti_id}/succeeded"
    api.put(**at(running, "left"), json={"value": 1}, headers=headers)
    # A running try must not use it to clear its state "after success" before it has succeeded.
    early = api.post(url, headers=headers)
    assert early.status_code == 403 and "not success" in detail(early)["message"]
    other = api.post("/task-instances/01234567-89ab-7def-8123-456789abcdef/succeeded", headers=headers)
    assert other.status_code == 403 and detail(other)["reason"] == "forbidden"
    set_ti_state(running, "failed")
    assert api.post(url, headers=headers).status_code == 403
    assert "left" in api.get(keys_url(running), headers=headers).json()["keys"]
    set_ti_state(running, "success")
    assert api.post(url, headers=headers).status_code == 204
    assert api.get(keys_url(running), headers=headers).json()["keys"] == []


def test_openapi_documents_versions_expiry_and_increments(api):
    paths = api.get("/openapi.json").json()["paths"]
    put = paths["/task-instances/{task_instance_id}/value"]["put"]
    assert {"409", "501"} <= set(put["responses"])
    assert "if_version" in [p["name"] for p in put["parameters"] if p["in"] == "query"]
    body = put["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"value", "ttl"} and body["additionalProperties"] is False
    for path in ("/task-instances/{task_instance_id}/increment", "/assets/increment"):
        assert "501" in paths[path]["post"]["responses"], path
    assert "/task-instances/{task_instance_id}/succeeded" in paths


# --- many keys in one request ------------------------------------------------------


def values_url(claims: TaskInstanceClaims, ti_id: str | None = None) -> str:
    return f"/task-instances/{ti_id or claims.ti_id}/values"


def test_batches_round_trip_in_one_request_each(api, running):
    headers = auth(running)
    offsets = {f"partition-{n}": {"offset": n * 1000} for n in range(100)}
    written = api.put(values_url(running), json={"values": offsets}, headers=headers)
    assert written.status_code == 200 and written.json()["versions"] == dict.fromkeys(offsets, 1)
    read = api.post(values_url(running) + "/read", json={"keys": [*offsets, "absent"]}, headers=headers)
    assert read.status_code == 200 and read.json() == {"values": offsets}
    deleted = api.post(values_url(running) + "/delete", json={"keys": list(offsets)[:99]}, headers=headers)
    assert deleted.status_code == 204
    left = api.post(values_url(running) + "/read", json={"keys": list(offsets)}, headers=headers)
    assert left.json() == {"values": {"partition-99": {"offset": 99000}}}
    api.post(values_url(running) + "/delete", json={"keys": ["partition-99"]}, headers=headers)
    # Asset state: only for an outlet, and read for a declared asset.
    asset = {"name": "state_tests_declared"}
    batch = api.put("/assets/values", params=asset, json={"values": {"low": 1, "high": 2}}, headers=headers)
    assert batch.status_code == 200
    both = api.post("/assets/values/read", params=asset, json={"keys": ["low", "high"]}, headers=headers)
    assert both.json() == {"values": {"low": 1, "high": 2}}
    inlet = {"name": "state_tests_inlet_only"}
    refused = api.put("/assets/values", params=inlet, json={"values": {"low": 1}}, headers=headers)
    assert refused.status_code == 403 and detail(refused)["reason"] == "asset_not_declared"
    assert (
        api.post("/assets/values/delete", params=inlet, json={"keys": ["x"]}, headers=headers).status_code
        == 403
    )
    assert (
        api.post(
            "/assets/values/delete", params=asset, json={"keys": ["low", "high"]}, headers=headers
        ).status_code
        == 204
    )


def test_batches_obey_the_same_identity_rules_as_single_keys(api, running):
    other_ti = "01234567-89ab-7def-8123-456789abcdef"
    other_try = dataclasses.replace(running, try_number=running.try_number + 1)
    requests = [
        ("PUT", "", {"values": {"k": 1}}),
        ("POST", "/read", {"keys": ["k"]}),
        ("POST", "/delete", {"keys": ["k"]}),
    ]
    for method, suffix, body in requests:
        assert api.request(method, values_url(running) + suffix, json=body).status_code == 401
        elsewhere = api.request(
            method, values_url(running, other_ti) + suffix, json=body, headers=auth(running)
        )
        assert elsewhere.status_code == 403, (method, suffix)
        not_mine = api.request(method, values_url(running) + suffix, json=body, headers=auth(other_try))
        assert not_mine.status_code == 403 and detail(not_mine)["reason"] == "forbidden"
    set_ti_state(running, "success")
    ended = api.put(values_url(running), json={"values": {"k": 1}}, headers=auth(running))
    assert ended.status_code == 403 and detail(ended)["reason"] == "not_running"
    assert (
        api.post(values_url(running) + "/read", json={"keys": ["k"]}, headers=auth(running)).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("suffix", "body", "reason", "message"),
    [
        ("", '{"values": {"ok": 1, "bad": null}}', "invalid_value", "the value of key 'bad'"),
        ("", '{"values": {"ok": 1, "": 2}}', "invalid_key", "must not be empty"),
        ("", '{"values": {"ok": 1, "nul\\u0000": 2}}', "invalid_key", "NUL"),
        ("", '{"values": {"ok": 1, "\\ud800": 2}}', "invalid_key", "not valid Unicode"),
        ("", '{"values": [["ok", 1]]}', "invalid_request", "request body must be"),
        ("", '{"values": {"ok": 1}, "ttl": -1}', "invalid_request", "ttl must be"),
        ("", '{"values": {"ok": 1}, "when": 1}', "invalid_value", "unknown: when"),
        ("/read", '{"keys": "ok"}', "invalid_request", "request body must be"),
        ("/read", '{"keys": ["ok", 7]}', "invalid_key", "must be a str"),
        ("/delete", '{"keys": ["ok", ""]}', "invalid_key", "must not be empty"),
        (
            "/delete",
            '{"keys": [' + ",".join(f'"k{n}"' for n in range(1001)) + "]}",
            "invalid_request",
            "at most 1000",
        ),
        (
            "",
            '{"values": {' + ",".join(f'"k{n}": 1' for n in range(1001)) + "}}",
            "invalid_request",
            "at most 1000",
        ),
    ],
    ids=[
        "null",
        "empty key",
        "NUL key",
        "surrogate",
        "list",
        "bad ttl",
        "unknown field",
        "keys str",
        "int key",
        "empty delete",
        "1001 deletes",
        "1001 writes",
    ],
)
def test_a_bad_batch_is_refused_whole_naming_the_entry_and_changes_nothing(
    api, running, suffix, body, reason, message
):
    headers = {**auth(running), "Content-Type": "application/json"}
    api.put(values_url(running), json={"values": {"ok": "original"}}, headers=headers)
    method = "PUT" if suffix == "" else "POST"
    refused = api.request(method, values_url(running) + suffix, content=body, headers=headers)
    assert refused.status_code == 422 and detail(refused)["reason"] == reason, refused.text[:300]
    assert message in detail(refused)["message"]
    kept = api.post(values_url(running) + "/read", json={"keys": ["ok"]}, headers=headers)
    assert kept.json() == {"values": {"ok": "original"}}
    api.post(values_url(running) + "/delete", json={"keys": ["ok"]}, headers=headers)


def test_batch_bodies_are_bounded_by_max_batch_bytes_and_each_value_by_max_value_bytes(
    api, running, monkeypatch
):
    headers = auth(running)
    monkeypatch.setenv("AIRFLOW__STATE__MAX_BATCH_BYTES", "2000")
    too_large = api.put(
        values_url(running), json={"values": {f"k{n}": "x" * 100 for n in range(30)}}, headers=headers
    )
    assert too_large.status_code == 413 and "max_batch_bytes" in detail(too_large)["message"]
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "16")
    one_too_large = api.put(values_url(running), json={"values": {"ok": 1, "big": "x" * 20}}, headers=headers)
    assert one_too_large.status_code == 422 and "max_value_bytes" in detail(one_too_large)["message"]
    read = api.post(values_url(running) + "/read", json={"keys": ["ok", "big"]}, headers=headers)
    assert read.json() == {"values": {}}


def test_a_batch_ttl_applies_to_every_key(api, running):
    headers = auth(running)
    api.put(values_url(running), json={"values": {"a": 1, "b": 2}, "ttl": 60}, headers=headers)
    assert _close_to(_stored_expiry(running, "a"), 60) and _close_to(_stored_expiry(running, "b"), 60)
    api.put(values_url(running), json={"values": {"a": 1}, "ttl": "never"}, headers=headers)
    assert _stored_expiry(running, "a") is None
    api.post(values_url(running) + "/delete", json={"keys": ["a", "b"]}, headers=headers)


def test_openapi_documents_the_batch_routes(api):
    paths = api.get("/openapi.json").json()["paths"]
    values = "/task-instances/{task_instance_id}/values"
    assert (
        "put" in paths[values] and "post" in paths[values + "/read"] and "post" in paths[values + "/delete"]
    )
    body = paths[values]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["values"] and body["properties"]["values"]["maxProperties"] == 1000
    assert {"put", "post"} <= set(paths["/assets/values"]) | set(paths["/assets/values/read"])


def test_a_read_trusts_a_check_of_its_task_instance_for_one_second_a_write_never(api, running, monkeypatch):
    """A new try of the task instance (its try number moves on): writes refused at once, reads after 1 s."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow_task_state.api import task_instance_checks

    # The checks' clock moves only when the test says so: a busy machine's pauses between these
    # requests must not age the check. No check is remembered yet (the module's earlier tests share
    # this task instance), so the first set checks the task instance and remembers it.
    now = [time.monotonic()]
    monkeypatch.setattr(task_instance_checks, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(task_instance_checks, "_recently_checked", {})
    headers = auth(running)
    assert api.put(**at(running, "checked"), json={"value": 1}, headers=headers).status_code == 200
    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id == UUID(running.ti_id))
            .values(try_number=running.try_number + 1)
        )
    try:
        written = api.put(**at(running, "checked"), json={"value": 2}, headers=headers)
        assert written.status_code == 403 and detail(written)["reason"] == "forbidden"
        assert api.get(**at(running, "checked"), headers=headers).json()["value"] == 1
        now[0] += task_instance_checks.READ_CHECK_SECONDS - 0.01
        assert api.get(**at(running, "checked"), headers=headers).json()["value"] == 1
        now[0] += 0.02
        refused = api.get(**at(running, "checked"), headers=headers)
        assert refused.status_code == 403 and detail(refused)["reason"] == "forbidden"
    finally:
        with create_session() as session:
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.id == UUID(running.ti_id))
                .values(try_number=running.try_number)
            )


@pytest.fixture
def resolved_by_fastapi(monkeypatch) -> list[str]:
    """The paths of the requests whose route FastAPI resolved (its dependencies, body, parameters)."""
    import fastapi.routing

    resolved, solve = [], fastapi.routing.solve_dependencies

    async def counted(*args, **kwargs):
        resolved.append(kwargs["request"].url.path)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return resolved


def test_a_plain_get_or_set_is_served_before_routing_and_answers_as_fastapi_would(
    api, running, resolved_by_fastapi
):
    """
    A task's get and set of one key, with its bearer credential and the key alone, skip the app's
    routing and FastAPI's resolution of the route (more than half of such a request's cost); the
    same request with one more query parameter (which the route ignores) is resolved by FastAPI, and
    answers alike, refusals included.
    """
    headers, key = {"authorization": auth(running)["Authorization"].replace("Bearer", "bearer")}, "a b+c/ü%"

    def both(method: str, **request) -> tuple:
        plain = api.request(method, **at(running, key), headers=headers, **request)
        assert resolved_by_fastapi == [], resolved_by_fastapi
        resolved = api.request(
            method, **at(running, key) | {"params": {"key": key, "x": "1"}}, headers=headers, **request
        )
        assert len(resolved_by_fastapi) == 1
        resolved_by_fastapi.clear()
        return plain, resolved

    absent = both("GET")
    assert absent[0].status_code == 404 and absent[0].json() == absent[1].json()
    written = both("PUT", json={"value": {"n": 1}})
    assert [answer.json()["key"] for answer in written] == [key, key]
    assert written[1].json()["version"] == written[0].json()["version"] + 1
    read = both("GET")
    assert (
        read[0].json()
        == read[1].json()
        == {"key": key, "value": {"n": 1}, "version": written[1].json()["version"]}
    )
    assert key in api.get(keys_url(running), headers=headers).json()["keys"]
    resolved_by_fastapi.clear()
    bad_body = both("PUT", json={"value": None})
    assert bad_body[0].status_code == 422 and bad_body[0].json() == bad_body[1].json()
    set_ti_state(running, "success")
    ended = both("PUT", json={"value": 2})
    assert ended[0].status_code == 403 and ended[0].json() == ended[1].json()
    assert detail(ended[0])["reason"] == "not_running"
    assert api.get(**at(running, key), headers=headers).json()["value"] == {"n": 1}


@pytest.mark.parametrize(
    ("request_", "statuses", "reason"),
    [
        pytest.param({"params": {"key": "k", "if_version": "0"}}, (200, 200), None, id="if_version"),
        pytest.param({"params": [("key", "k"), ("key", "k")]}, (422, 422), "invalid_key", id="key-twice"),
        pytest.param({"params": {"key": "a\x00b"}}, (422, 422), "invalid_key", id="invalid-key"),
        pytest.param({"ti_id": str(UUID(int=1))}, (403, 403), "forbidden", id="another-task-instance"),
        pytest.param(
            {"headers": {"Authorization": "Bearer not.a.credential"}},
            (401, 401),
            "invalid_token",
            id="forged",
        ),
        # A forged second credential beside a valid one: the route reads the first, as ever.
        pytest.param({"headers": "valid, then forged"}, (200, 200), None, id="authorization-twice"),
    ],
)
def test_any_other_get_or_set_is_resolved_by_fastapi_and_refused_as_the_route_says(
    api, running, resolved_by_fastapi, request_, statuses, reason
):
    headers = request_.get("headers", auth(running))
    if headers == "valid, then forged":
        headers = [("Authorization", auth(running)["Authorization"]), ("Authorization", "Bearer x.y.z")]
    url = f"/task-instances/{request_.get('ti_id', running.ti_id)}/value"
    params = request_.get("params", {"key": "k"})
    written = api.put(url, params=params, json={"value": 1}, headers=headers)
    read = api.get(url, params=params, headers=headers)
    assert len(resolved_by_fastapi) == 2
    assert (written.status_code, read.status_code) == statuses
    if reason is not None:
        assert detail(written)["reason"] == detail(read)["reason"] == reason


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param("/task-instances/{ti}/x/value", 404, id="a-segment-more"),
        pytest.param("/task-instances/{ti}/value/", 307, id="a-trailing-slash"),  # Starlette's redirect
        pytest.param("/task-instances/value", 404, id="no-task-instance"),
        pytest.param("/state/task-instances/{ti}/value", 404, id="under-another-prefix"),
    ],
)
def test_a_path_beside_a_tasks_value_is_left_to_the_router(api, running, path, status):
    """Only the value's own path is served before routing: a credential naming the task instance
    in another path gets what the router answers, never the value."""
    api.put(**at(running), json={"value": "kept"}, headers=auth(running))
    url = path.format(ti=running.ti_id)
    for method, body in (("GET", None), ("PUT", {"value": "other"})):
        answered = api.request(
            method, url, params={"key": "k"}, json=body, headers=auth(running), follow_redirects=False
        )
        assert answered.status_code == status, (method, answered.text)
    assert api.get(**at(running), headers=auth(running)).json()["value"] == "kept"


def test_an_unexpected_error_of_a_plain_request_is_a_500_as_the_routes(
    session_key, running, plain_backend, monkeypatch
):
    """A plain request's error that no exception handler of the app knows (a backend's bug) is
    Starlette's 500, as on the route: never a hang, never an answer that looks like a value."""
    from airflow_task_state.api.app import create_app

    def broken(scope, key, *, session=None):
        raise RuntimeError("a bug in a backend")

    monkeypatch.setattr(plain_backend, "get", broken)
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        plain = client.get(**at(running), headers=auth(running))
        resolved = client.get(**at(running) | {"params": {"key": "k", "x": "1"}}, headers=auth(running))
    assert plain.status_code == resolved.status_code == 500
    assert plain.text == resolved.text == "Internal Server Error"
