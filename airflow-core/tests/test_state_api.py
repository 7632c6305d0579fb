"""The state API's rules, checked over HTTP against real task instances in the database of the run."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from uuid import UUID

import pytest
from airflow.state.tokens import TaskInstanceClaims, mint
from conftest_helpers import run_airflow
from fastapi.testclient import TestClient
from sqlalchemy import select, update

SECRET = "a-test-secret-" + "x" * 50
TEST_DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="module")
def exercise_ti() -> TaskInstanceClaims:
    """A real task instance (from a real `airflow dags test` run), as a token would name it."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(TEST_DAGS)
    run_airflow("dags", "reserialize")
    run_airflow("dags", "test", "state_api_surface")
    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.dag_id == "state_api_surface", TaskInstance.task_id == "exercise")
            .order_by(TaskInstance.start_date.desc())
        ).first()
        return TaskInstanceClaims(str(ti.id), ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)


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
def api(monkeypatch):
    from airflow.state.api.app import create_app

    monkeypatch.setenv("AIRFLOW__STATE__API_SECRET", SECRET)
    with TestClient(create_app()) as client:
        yield client


def auth(claims: TaskInstanceClaims, secret: str = SECRET, **kwargs) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(claims, secret, **kwargs)}"}


def key_url(claims: TaskInstanceClaims, key: str = "k", ti_id: str | None = None) -> str:
    return f"/task-instances/{ti_id or claims.ti_id}/keys/{key}"


def test_round_trip_list_delete_clear(api, running):
    headers = auth(running)
    assert (
        api.put(key_url(running, "job"), json={"value": {"id": "app_001"}}, headers=headers).status_code
        == 204
    )
    assert api.put(key_url(running, "n"), json={"value": 3}, headers=headers).status_code == 204
    assert api.get(key_url(running, "job"), headers=headers).json() == {
        "key": "job",
        "value": {"id": "app_001"},
    }
    # "kept" was written by the task itself during its run.
    assert api.get(f"/task-instances/{running.ti_id}/keys", headers=headers).json()["keys"] == [
        "job",
        "kept",
        "n",
    ]
    assert api.delete(key_url(running, "job"), headers=headers).status_code == 204
    missing = api.get(key_url(running, "job"), headers=headers)
    assert missing.status_code == 404 and missing.json()["detail"] == "no state under key 'job'"
    assert api.delete(f"/task-instances/{running.ti_id}/keys", headers=headers).status_code == 204
    assert api.get(f"/task-instances/{running.ti_id}/keys", headers=headers).json()["keys"] == []


def test_writes_record_the_try(api, running, backend):
    from airflow.state.models import TaskStateModel
    from airflow.utils.session import create_session

    api.put(key_url(running, "tried"), json={"value": 1}, headers=auth(running))
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
    assert api.get(key_url(exercise_ti), headers=headers).status_code == 401


def test_wrong_secret_and_expired_tokens_are_401(api, exercise_ti):
    wrong = api.get(key_url(exercise_ti), headers=auth(exercise_ti, secret="another-secret-" + "y" * 50))
    assert wrong.status_code == 401 and "api_secret" in wrong.json()["detail"]
    expired = api.get(key_url(exercise_ti), headers=auth(exercise_ti, now=time.time() - 3600))
    assert expired.status_code == 401 and expired.json()["detail"] == "token expired"


def test_server_without_a_secret_says_so(monkeypatch, exercise_ti):
    from airflow.state.api.app import create_app

    monkeypatch.setenv("AIRFLOW__STATE__API_SECRET", "")
    with TestClient(create_app()) as client:
        response = client.get(key_url(exercise_ti), headers=auth(exercise_ti))
    assert response.status_code == 503 and "[state] api_secret is not set" in response.json()["detail"]


def test_a_token_cannot_reach_another_task_instance(api, running):
    other = "01234567-89ab-7def-8123-456789abcdef"
    for method in ("GET", "PUT", "DELETE"):
        response = api.request(
            method, key_url(running, ti_id=other), json={"value": 1}, headers=auth(running)
        )
        assert response.status_code == 403, method
    forged = dataclasses.replace(running, task_id="some_other_task")
    assert api.get(key_url(forged), headers=auth(forged)).status_code == 403
    unknown = dataclasses.replace(running, ti_id=other)
    assert api.get(key_url(unknown), headers=auth(unknown)).status_code == 403


def test_only_the_running_try_may_write(api, running):
    stale = dataclasses.replace(running, try_number=running.try_number + 1)
    refused = api.put(key_url(stale), json={"value": 1}, headers=auth(stale))
    assert refused.status_code == 403 and "only a running try" in refused.json()["detail"]
    set_ti_state(running, "success")
    assert api.put(key_url(running), json={"value": 1}, headers=auth(running)).status_code == 403
    assert api.delete(key_url(running), headers=auth(running)).status_code == 403
    assert api.get(key_url(running), headers=auth(running)).status_code in (200, 404)


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
    api.put(key_url(running, "kept"), json={"value": "original"}, headers=headers)
    assert api.put(key_url(running, "kept"), content=body, headers=headers).status_code == 422
    assert api.get(key_url(running, "kept"), headers=headers).json()["value"] == "original"


def test_unstorable_keys_and_too_large_values_are_422(api, running, monkeypatch):
    headers = auth(running)
    assert api.put(key_url(running, "k" * 513), json={"value": 1}, headers=headers).status_code == 422
    nul_key = api.put(key_url(running, "nul%00key"), json={"value": 1}, headers=headers)
    assert nul_key.status_code == 422 and "NUL" in nul_key.json()["detail"]
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "16")
    too_large = api.put(key_url(running), json={"value": "x" * 20}, headers=headers)
    assert too_large.status_code == 422 and "max_value_bytes" in too_large.json()["detail"]


def test_asset_state_only_for_declared_assets(api, running):
    headers = auth(running)
    by_name = {"name": "state_tests_declared"}
    by_uri = {"uri": "file:///tmp/state-tests/declared"}
    assert (
        api.put("/assets/keys/watermark", params=by_name, json={"value": 41}, headers=headers).status_code
        == 204
    )
    assert api.get("/assets/keys/watermark", params=by_uri, headers=headers).json()["value"] == 41
    assert api.get("/assets/keys", params=by_name, headers=headers).json()["keys"] == ["watermark"]
    other = api.get("/assets/keys/watermark", params={"name": "state_tests_undeclared"}, headers=headers)
    assert other.status_code == 403 and "does not declare" in other.json()["detail"]
    unknown = api.get("/assets/keys/watermark", params={"name": "no-such-asset"}, headers=headers)
    assert unknown.status_code == 404
    assert api.get("/assets/keys/watermark", headers=headers).status_code == 422


def test_openapi_schema_describes_the_routes(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/task-instances/{task_instance_id}/keys/{key}", "/assets/keys/{key}"} <= set(paths)
    assert "403" in paths["/task-instances/{task_instance_id}/keys/{key}"]["put"]["responses"]
