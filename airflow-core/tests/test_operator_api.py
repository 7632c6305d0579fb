"""
The operators' REST API (``/api/v1`` of the state app), in-process against the metadata database
of the run, on the metastore backend and on Redis, with Airflow tokens of SimpleAuthManager users
of every role.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import quote

import pytest
from airflow_shared.state import BaseStateBackend, StateScope
from fastapi.testclient import TestClient

V1 = "/api/v1"
JWT_SECRET = "operator-api-test-jwt-secret-" + "s" * 48
ROLES = ("viewer", "user", "op", "admin")


# --- the app and who calls it ------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _airflow_token_secret() -> Iterator[None]:
    """A fixed [api_auth] jwt_secret, so that Airflow does not write a generated one into the config."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
        yield


@pytest.fixture(scope="module")
def mint(_airflow_token_secret, airflow_db) -> Callable[..., str]:
    """``mint(role, **generate_jwt_options)``: an Airflow token of a SimpleAuthManager user of *role*."""
    from airflow.api_fastapi.app import get_auth_manager, init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    init_auth_manager()

    def mint(role: str, **options) -> str:
        return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=role, role=role), **options)

    return mint


@pytest.fixture(scope="module")
def as_role(mint) -> dict[str, dict[str, str]]:
    """The request headers of each role: ``as_role["viewer"]``."""
    return {role: {"Authorization": f"Bearer {mint(role)}"} for role in ROLES}


@pytest.fixture(scope="module")
def api(mint) -> Iterator[TestClient]:
    from airflow_task_state.api.app import create_app

    with TestClient(create_app()) as client:
        yield client


# --- the backend: the same tests on the metastore and on Redis ------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    from state_testing.dbservers import have_redis_server, redis_server

    if not have_redis_server():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with redis_server() as url:
        yield url


@pytest.fixture(params=["metastore", "redis"])
def backend(request, monkeypatch):
    """The configured state backend ([state] backend), which the API uses."""
    from airflow_task_state import get_state_backend
    from airflow_task_state.configured_backend import reset_state_backend

    if request.param == "redis":
        monkeypatch.setenv("AIRFLOW__STATE__BACKEND", "airflow_state_redis.RedisStateBackend")
        monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", request.getfixturevalue("redis_url"))
    reset_state_backend()
    yield get_state_backend()
    reset_state_backend()


def records_writes(backend) -> bool:
    """
    Whether the backend records when and by which try a key was written: those that override
    ``entries()`` (the metastore; Redis once its metadata is in); the default knows neither.
    """
    from airflow_shared.state import BaseStateBackend
    from airflow_task_state.metrics import unwrap_state_backend

    # With metrics on, the configured backend is wrapped: look at the backend it measures.
    return type(unwrap_state_backend(backend)).entries is not BaseStateBackend.entries


# --- a dag run with task instances, and assets ---------------------------------------------------


@dataclass
class Run:
    dag_id: str
    run_id: str

    def ti(self, task_id: str, suffix: str = "") -> str:
        """The URL of a task instance's state (``.../state``), or of *suffix* after the task id."""
        return f"{V1}/dags/{self.dag_id}/dagRuns/{self.run_id}/taskInstances/{task_id}/{suffix or 'state'}"

    @property
    def url(self) -> str:
        return f"{V1}/dags/{self.dag_id}/dagRuns/{self.run_id}/state"

    def scope(self, task_id: str, map_index: int = -1):
        from airflow.utils.session import create_session
        from airflow_task_state.manage import find_task_scope

        with create_session() as session:
            return find_task_scope(self.dag_id, self.run_id, task_id, map_index, session)


# The run's task instances: `submit` and `quiet` are not mapped, `partition` has map indices 0 and 1.
TASK_INSTANCES = (("submit", -1), ("partition", 0), ("partition", 1), ("quiet", -1))


@pytest.fixture
def run(backend, make_dag_run, unique) -> Iterator[Run]:
    """A dag run of its own with four task instances (no state yet); their state is cleared after."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert

    made = Run(f"operator_api_{unique}", "manual_1")
    make_dag_run(made.dag_id, made.run_id)
    with create_session() as session:
        for task_id, map_index in TASK_INSTANCES:
            session.execute(
                insert(TaskInstance).values(
                    task_id=task_id,
                    dag_id=made.dag_id,
                    run_id=made.run_id,
                    map_index=map_index,
                    try_number=2,
                    pool="default_pool",
                    state="success",
                )
            )
    yield made
    for task_id in {task_id for task_id, _ in TASK_INSTANCES}:
        backend.clear(made.scope(task_id, 0 if task_id == "partition" else -1), all_map_indices=True)
    with create_session() as session:
        session.execute(delete(TaskInstance).where(TaskInstance.dag_id == made.dag_id))


@pytest.fixture
def asset(backend, make_asset) -> Iterator[int]:
    """An asset of its own (no state yet); its state is cleared after."""
    from airflow_shared.state import AssetScope

    made = make_asset(1)
    yield made
    backend.clear(AssetScope(made))


def asset_url(asset_id: int, suffix: str = "state") -> str:
    return f"{V1}/assets/{asset_id}/{suffix}"


def key_url(key: str) -> str:
    """The URL suffix of one key: the ``key`` query parameter, the only way to name one."""
    return "stateEntry?key=" + quote(key, safe="")


def increment_url(key: str) -> str:
    return "stateIncrement?key=" + quote(key, safe="")


def detail(response) -> dict:
    body = response.json()
    assert set(body) == {"detail"} and set(body["detail"]) == {"reason", "message"}, body
    return body["detail"]


def refused(response, status: int, reason: str) -> str:
    """Assert the response is a refusal with *status* and *reason*; return its message."""
    assert response.status_code == status, (response.status_code, response.text)
    found = detail(response)
    assert found["reason"] == reason, found
    return found["message"]


# --- task state ----------------------------------------------------------------------------------

VALUES = [
    "plain text",
    "naïve ☃ 日本語 🚀",
    {"pages": [1, 2, {"deep": {"deeper": [True, False, 0.5]}}], "note": "ünïcode"},
    [],
    0,
    -12.5,
    False,
    "",
]


def test_task_state_round_trips_every_value(api, as_role, run, backend):
    user = as_role["user"]
    for number, value in enumerate(VALUES):
        key = f"key/{number}"
        put = api.put(run.ti("submit", key_url(key)), json={"value": value}, headers=user)
        assert put.status_code == 200, put.text
        written = put.json()
        assert set(written) == {"key", "version", "expires_at"} and written["key"] == key
        stored = api.get(run.ti("submit", key_url(key)), headers=user).json()
        assert stored["key"] == key and stored["value"] == value and stored["updated_by_try"] is None
        assert stored["version"] == written["version"] and stored["expires_at"] == written["expires_at"]
        assert (stored["updated_at"] is not None) == records_writes(backend)
        by_query = api.get(run.ti("submit", "stateEntry"), params={"key": key}, headers=user)
        assert by_query.json() == stored
    # The query form takes every key, and writes the same entries.
    for key in (".", "..", "a/../b", "/lead", "trail/", "ключ", "k" * 512):
        put = api.put(run.ti("submit", "stateEntry"), params={"key": key}, json={"value": key}, headers=user)
        assert put.status_code == 200 and put.json()["key"] == key, put.text
        assert (
            api.get(run.ti("submit", "stateEntry"), params={"key": key}, headers=user).json()["value"] == key
        )
    listed = api.get(run.ti("submit"), params={"limit": 1000}, headers=user).json()
    assert listed["total_entries"] == len(VALUES) + 7
    assert [entry["key"] for entry in listed["entries"]] == sorted(
        entry["key"] for entry in listed["entries"]
    )
    # Delete; a key that is not there is not an error.
    assert api.delete(run.ti("submit", key_url("key/0")), headers=user).status_code == 204
    assert api.delete(run.ti("submit", "stateEntry"), params={"key": ".."}, headers=user).status_code == 204
    assert api.delete(run.ti("submit", key_url("key/0")), headers=user).status_code == 204
    assert (
        api.delete(run.ti("submit", "stateEntry"), params={"key": "never"}, headers=user).status_code == 204
    )
    refused(api.get(run.ti("submit", key_url("key/0")), headers=user), 404, "key_not_found")
    refused(api.get(run.ti("submit", "stateEntry"), params={"key": ".."}, headers=user), 404, "key_not_found")
    assert backend.get(run.scope("submit"), ".") == '"."'


def test_query_keys_are_percent_decoded(api, as_role, run):
    user = as_role["user"]
    key = "a b/ü?#%&key=x"
    put = api.put(run.ti("submit", key_url(key)), json={"value": 1}, headers=user)
    assert put.status_code == 200 and put.json()["key"] == key
    assert api.get(run.ti("submit", "stateEntry"), params={"key": key}, headers=user).json()["value"] == 1


def test_the_path_form_of_a_key_is_gone(api, as_role, run, asset):
    """Keys were once also accepted at the end of the path (`.../state/{key}`): no route takes them now."""
    op = as_role["op"]
    for scope_url in (run.ti("submit", ""), asset_url(asset, "")):
        for method, suffix in (
            ("GET", "state/k"),
            ("PUT", "state/k"),
            ("DELETE", "state/k"),
            ("POST", "stateIncrement/n"),
        ):
            gone = api.request(method, scope_url + suffix, json={"value": 1}, headers=op)
            assert gone.status_code in (404, 405), (method, scope_url + suffix)
    for key in ("k", "n"):
        refused(api.get(run.ti("submit", key_url(key)), headers=op), 404, "key_not_found")


def test_value_at_the_size_limit_is_stored_and_one_byte_more_is_refused(api, as_role, run, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    user = as_role["user"]
    at_limit = "é" * 49  # 98 bytes of UTF-8 and two quotes: exactly 100 bytes of JSON
    put = api.put(run.ti("submit", key_url("big")), json={"value": at_limit}, headers=user)
    assert put.status_code == 200
    assert api.get(run.ti("submit", key_url("big")), headers=user).json()["value"] == at_limit
    message = refused(
        api.put(run.ti("submit", key_url("big")), json={"value": at_limit + "a"}, headers=user),
        422,
        "invalid_value",
    )
    assert "101 bytes" in message and "max_value_bytes" in message
    assert api.get(run.ti("submit", key_url("big")), headers=user).json()["value"] == at_limit


def test_a_huge_body_is_refused_before_it_is_parsed(api, as_role, run, asset, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    body = json.dumps({"value": "x" * 5000})
    for url in (run.ti("submit", key_url("big")), asset_url(asset, key_url("big"))):
        response = api.put(url, content=body, headers={**as_role["op"], "Content-Type": "application/json"})
        assert "max_value_bytes" in refused(response, 413, "body_too_large")


@pytest.mark.parametrize(
    "body",
    [
        {"value": None},
        {},
        {"value": 1, "other": 2},
        [1],
        "NaN-as-text",
    ],
    ids=["null", "missing", "extra-field", "not-an-object", "not-json"],
)
def test_a_value_that_is_not_a_json_document_but_null_is_refused(api, as_role, run, body):
    user = {**as_role["user"], "Content-Type": "application/json"}
    content = "{" if body == "NaN-as-text" else json.dumps(body)
    refused(api.put(run.ti("submit", key_url("k")), content=content, headers=user), 422, "invalid_value")
    nan = api.put(run.ti("submit", key_url("k")), content='{"value": NaN}', headers=user)
    assert "NaN" in refused(nan, 422, "invalid_value")
    refused(api.get(run.ti("submit", key_url("k")), headers=user), 404, "key_not_found")


@pytest.mark.parametrize(
    "raw_key",
    ["nul%00key", "k" * 513, "", "%FF", "a&key=b"],
    ids=["nul", "513-chars", "empty", "bad-utf8", "twice"],
)
def test_bad_keys_are_refused_and_never_become_another_key(api, as_role, run, asset, raw_key):
    """The `key` query parameter, as it is sent (percent-encoded): refused, on both kinds of scope."""
    op = as_role["op"]
    api.put(run.ti("submit", "stateEntry"), params={"key": "a/b"}, json={"value": "kept"}, headers=op)
    for url in (run.ti("submit", "stateEntry"), asset_url(asset, "stateEntry")):
        for method in ("GET", "PUT", "DELETE"):
            body = {"json": {"value": 1}} if method == "PUT" else {}
            refused(api.request(method, f"{url}?key={raw_key}", headers=op, **body), 422, "invalid_key")
        increment = url.replace("stateEntry", "stateIncrement")
        refused(api.post(f"{increment}?key={raw_key}", json={}, headers=op), 422, "invalid_key")
    assert [e["key"] for e in api.get(run.ti("submit"), headers=op).json()["entries"]] == ["a/b"]


def test_dot_segments_in_a_key_are_kept(api, as_role, run):
    """In a path, clients (httpx, browsers) resolve `a/./b` to `a/b`; in the query, `a/./b` stays itself."""
    user = as_role["user"]
    api.put(run.ti("submit", "stateEntry"), params={"key": "a/b"}, json={"value": "a/b"}, headers=user)
    refused(
        api.get(run.ti("submit", "stateEntry"), params={"key": "a/./b"}, headers=user), 404, "key_not_found"
    )


def test_query_key_must_be_given_once_and_be_utf8(api, as_role, run):
    user = as_role["user"]
    refused(api.get(run.ti("submit", "stateEntry"), headers=user), 422, "invalid_request")
    refused(api.get(run.ti("submit", "stateEntry?key=a&key=b"), headers=user), 422, "invalid_key")
    refused(api.get(run.ti("submit", "stateEntry?key=%FF"), headers=user), 422, "invalid_key")


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 1001},
        {"offset": -1},
        {"map_index": -2},
        {"limit": "ten"},
        {"map_index": 2**40},
        {"offset": 2**70},
        {"key_prefix": "nul\x00"},
    ],
    ids=[
        "limit-0",
        "limit-1001",
        "offset-negative",
        "map-index-minus-2",
        "limit-not-a-number",
        "map-index-beyond-the-column",
        "offset-beyond-any-database",
        "prefix-with-nul",
    ],
)
def test_bad_query_parameters_are_refused(api, as_role, run, asset, params):
    viewer = as_role["viewer"]
    refused(api.get(run.ti("submit"), params=params, headers=viewer), 422, "invalid_request")
    if "map_index" not in params:
        refused(api.get(asset_url(asset), params=params, headers=viewer), 422, "invalid_request")


def test_unknown_run_task_instance_and_map_index_are_404(api, as_role, run):
    admin = as_role["admin"]
    missing_run = Run(run.dag_id, "no_such_run")
    missing_dag = Run("no_such_dag_" + run.dag_id, run.run_id)
    for target in (missing_run, missing_dag):
        assert "no dag run" in refused(api.get(target.url, headers=admin), 404, "dag_run_not_found")
        for method in ("GET", "PUT", "DELETE"):
            body = {"json": {"value": 1}} if method == "PUT" else {}
            refused(
                api.request(method, target.ti("submit", key_url("k")), headers=admin, **body),
                404,
                "dag_run_not_found",
            )
            refused(
                api.request(method, target.ti("submit", "stateEntry?key=k"), headers=admin, **body),
                404,
                "dag_run_not_found",
            )
        refused(api.get(target.ti("submit"), headers=admin), 404, "dag_run_not_found")
    refused(api.get(run.ti("nope"), headers=admin), 404, "task_instance_not_found")
    refused(
        api.put(run.ti("nope", key_url("k")), json={"value": 1}, headers=admin),
        404,
        "task_instance_not_found",
    )
    refused(api.delete(run.ti("nope"), headers=admin), 404, "task_instance_not_found")
    refused(
        api.delete(run.ti("nope"), params={"all_map_indices": "true"}, headers=admin),
        404,
        "task_instance_not_found",
    )
    # `partition` is mapped: it has no map index -1, nor 7; `submit` has no map index 0.
    message = refused(api.get(run.ti("partition"), headers=admin), 404, "task_instance_not_found")
    assert "'partition'" in message
    missing_index = api.get(
        run.ti("partition", "stateEntry"), params={"key": "k", "map_index": 7}, headers=admin
    )
    assert "map_index=7" in refused(missing_index, 404, "task_instance_not_found")
    refused(api.get(run.ti("submit"), params={"map_index": 0}, headers=admin), 404, "task_instance_not_found")
    refused(api.get(run.ti("submit", key_url("k")), headers=admin), 404, "key_not_found")


def test_listing_pages_and_filters_by_prefix(api, as_role, run, backend):
    user = as_role["user"]
    keys = [f"job/{n:02d}" for n in range(12)] + ["other", "jobless"]
    for key in keys:
        api.put(run.ti("submit", "stateEntry"), params={"key": key}, json={"value": key}, headers=user)
    everything = api.get(run.ti("submit"), headers=user).json()
    assert everything["total_entries"] == 14 and [e["key"] for e in everything["entries"]] == sorted(keys)
    page = api.get(
        run.ti("submit"), params={"limit": 5, "offset": 5, "key_prefix": "job/"}, headers=user
    ).json()
    assert page["total_entries"] == 12
    assert [e["key"] for e in page["entries"]] == [f"job/{n:02d}" for n in range(5, 10)]
    assert [e["value"] for e in page["entries"]] == [f"job/{n:02d}" for n in range(5, 10)]
    last = api.get(run.ti("submit"), params={"offset": 10, "key_prefix": "job/"}, headers=user).json()
    assert [e["key"] for e in last["entries"]] == ["job/10", "job/11"]
    beyond = api.get(run.ti("submit"), params={"offset": 100}, headers=user).json()
    assert beyond == {**beyond, "entries": [], "total_entries": 14}
    # The prefix is plain text, not a pattern.
    assert api.get(run.ti("submit"), params={"key_prefix": "job%"}, headers=user).json()["total_entries"] == 0
    assert api.get(run.ti("submit"), params={"key_prefix": "job"}, headers=user).json()["total_entries"] == 13
    assert api.get(run.ti("submit"), params={"key_prefix": ""}, headers=user).json()["total_entries"] == 14


def test_updated_by_try_is_the_tasks_for_task_writes_and_null_for_operator_writes(api, as_role, run, backend):
    user = as_role["user"]
    backend.set_by_try(run.scope("submit"), "written_by_task", '{"job":"app_001"}', try_number=2)
    by_task = api.get(run.ti("submit", key_url("written_by_task")), headers=user).json()
    if records_writes(backend):
        assert by_task["updated_by_try"] == 2 and by_task["updated_at"].endswith("Z")
    assert by_task["value"] == {"job": "app_001"}
    listed = api.get(run.ti("submit"), headers=user).json()["entries"]
    assert listed == [by_task]
    api.put(run.ti("submit", key_url("written_by_task")), json={"value": 3}, headers=user)
    overwritten = api.get(run.ti("submit", key_url("written_by_task")), headers=user).json()
    assert overwritten["updated_by_try"] is None and overwritten["value"] == 3


def test_clear_one_map_index_or_every_map_index(api, as_role, run, backend):
    user = as_role["user"]
    for map_index in (0, 1):
        for key in ("offset", "rows"):
            params = {"key": key, "map_index": map_index}
            url = run.ti("partition", "stateEntry")
            assert api.put(url, params=params, json={"value": map_index}, headers=user).status_code == 200
    api.put(run.ti("submit", key_url("job")), json={"value": "kept"}, headers=user)

    assert api.delete(run.ti("partition"), params={"map_index": 0}, headers=user).status_code == 204
    assert api.get(run.ti("partition"), params={"map_index": 0}, headers=user).json()["total_entries"] == 0
    assert api.get(run.ti("partition"), params={"map_index": 1}, headers=user).json()["total_entries"] == 2

    api.put(
        run.ti("partition", "stateEntry"),
        params={"key": "offset", "map_index": 0},
        json={"value": 0},
        headers=user,
    )
    cleared = api.delete(run.ti("partition"), params={"all_map_indices": "true"}, headers=user)
    assert cleared.status_code == 204
    for map_index in (0, 1):
        assert (
            api.get(run.ti("partition"), params={"map_index": map_index}, headers=user).json()[
                "total_entries"
            ]
            == 0
        )
    # Other tasks keep their state.
    assert api.get(run.ti("submit", key_url("job")), headers=user).json()["value"] == "kept"


def test_the_run_listing_counts_keys_per_task_instance(api, as_role, run):
    user = as_role["user"]
    empty = api.get(run.url, headers=as_role["viewer"])
    assert empty.status_code == 200
    assert empty.json() == {"task_instances": [], "total_entries": 0, "can_edit": False, "can_delete": False}
    for key in ("a", "b", "c"):
        api.put(run.ti("submit", key_url(key)), json={"value": 1}, headers=user)
    api.put(
        run.ti("partition", "stateEntry"),
        params={"key": "offset", "map_index": 1},
        json={"value": 1000},
        headers=user,
    )
    listing = api.get(run.url, headers=user).json()
    assert listing == {
        "task_instances": [
            {"task_id": "partition", "map_index": 1, "key_count": 1},
            {"task_id": "submit", "map_index": -1, "key_count": 3},
        ],
        "total_entries": 2,
        "can_edit": True,
        "can_delete": True,
    }


# --- asset state ---------------------------------------------------------------------------------


def test_asset_state_round_trips_in_both_key_forms(api, as_role, asset, backend):
    op = as_role["op"]
    for number, value in enumerate(VALUES):
        put = api.put(asset_url(asset, key_url(f"w/{number}")), json={"value": value}, headers=op)
        assert put.status_code == 200, put.text
        stored = api.get(asset_url(asset, "stateEntry"), params={"key": f"w/{number}"}, headers=op).json()
        assert stored["value"] == value and stored["updated_by"]["kind"] == "api"
        assert stored["version"] == put.json()["version"]
        assert api.get(asset_url(asset, key_url(f"w/{number}")), headers=op).json() == stored
    assert (
        api.put(
            asset_url(asset, "stateEntry"), params={"key": ".."}, json={"value": 1}, headers=op
        ).status_code
        == 200
    )
    listed = api.get(asset_url(asset), headers=op).json()
    assert listed["total_entries"] == len(VALUES) + 1
    assert listed["asset"] == {
        "asset_id": asset,
        "name": listed["asset"]["name"],
        "uri": listed["asset"]["uri"],
        "group": "asset",
    }
    assert listed["asset"]["name"].startswith("state_") and listed["can_edit"] and listed["can_delete"]
    page = api.get(asset_url(asset), params={"key_prefix": "w/", "limit": 2, "offset": 1}, headers=op).json()
    assert [e["key"] for e in page["entries"]] == ["w/1", "w/2"] and page["total_entries"] == len(VALUES)

    assert api.delete(asset_url(asset, key_url("w/0")), headers=op).status_code == 204
    assert api.delete(asset_url(asset, "stateEntry"), params={"key": ".."}, headers=op).status_code == 204
    refused(api.get(asset_url(asset, key_url("w/0")), headers=op), 404, "key_not_found")
    assert api.delete(asset_url(asset), headers=op).status_code == 204
    assert api.get(asset_url(asset), headers=op).json()["total_entries"] == 0


def test_unknown_asset_is_404_and_bad_asset_ids_are_refused(api, as_role, asset):
    admin = as_role["admin"]
    missing = asset + 10_000_000
    for method, suffix in (
        ("GET", "state"),
        ("DELETE", "state"),
        ("GET", key_url("k")),
        ("PUT", key_url("k")),
        ("DELETE", key_url("k")),
        ("GET", "stateEntry?key=k"),
        ("PUT", "stateEntry?key=k"),
        ("DELETE", "stateEntry?key=k"),
    ):
        body = {"json": {"value": 1}} if method == "PUT" else {}
        response = api.request(method, asset_url(missing, suffix), headers=admin, **body)
        assert f"id={missing}" in refused(response, 404, "asset_not_found")
    refused(api.get(asset_url(asset, key_url("k")), headers=admin), 404, "key_not_found")
    refused(api.get(f"{V1}/assets/not-a-number/state", headers=admin), 422, "invalid_request")
    refused(api.get(f"{V1}/assets/{2**40}/state", headers=admin), 422, "invalid_request")
    refused(api.get(f"{V1}/assets", params={"limit": 0}, headers=admin), 422, "invalid_request")


def test_the_asset_listing_shows_assets_with_state(api, as_role, make_asset, backend):
    from airflow_shared.state import AssetScope

    op = as_role["op"]
    first, second, stateless = make_asset(1), make_asset(2), make_asset(3)
    try:
        api.put(asset_url(first, key_url("a")), json={"value": 1}, headers=op)
        for key in ("a", "b"):
            api.put(asset_url(second, key_url(key)), json={"value": 1}, headers=op)
        listing = api.get(f"{V1}/assets", params={"limit": 1000}, headers=as_role["viewer"]).json()
        assert listing["can_edit"] is False and listing["total_entries"] == len(listing["assets"])
        ours = {a["asset_id"]: a for a in listing["assets"] if a["asset_id"] in (first, second, stateless)}
        assert {asset_id: a["key_count"] for asset_id, a in ours.items()} == {first: 1, second: 2}
        assert set(ours[first]) == {"asset_id", "name", "uri", "group", "key_count"}
        names = [(a["name"], a["uri"]) for a in listing["assets"]]
        assert names == sorted(names)
        # Pages of one asset each walk the same list.
        walked = [
            api.get(f"{V1}/assets", params={"limit": 1, "offset": n}, headers=op).json()["assets"][0]
            for n in range(listing["total_entries"])
        ]
        assert walked == listing["assets"]
        assert api.get(f"{V1}/assets", headers=op).json()["can_edit"] is True
    finally:
        for asset_id in (first, second):
            backend.clear(AssetScope(asset_id))


# --- expiry, versions, increments, writers -------------------------------------------------------


def seconds_from_now(text: str | None) -> float:
    from datetime import UTC, datetime

    assert text is not None
    return (datetime.fromisoformat(text.replace("Z", "+00:00")) - datetime.now(UTC)).total_seconds()


def test_ttl_never_and_the_default_retention_are_applied_and_listed(api, as_role, run, asset, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "2d")
    user, op = as_role["user"], as_role["op"]
    written = {
        "hour": api.put(run.ti("submit", key_url("hour")), json={"value": 1, "ttl": 3600}, headers=user),
        "never": api.put(run.ti("submit", key_url("never")), json={"value": 1, "ttl": "never"}, headers=user),
        "default": api.put(run.ti("submit", "stateEntry?key=default"), json={"value": 1}, headers=user),
    }
    assert all(response.status_code == 200 for response in written.values()), written
    listed = {entry["key"]: entry for entry in api.get(run.ti("submit"), headers=user).json()["entries"]}
    for key, response in written.items():
        assert listed[key]["expires_at"] == response.json()["expires_at"], key
    assert 3590 < seconds_from_now(listed["hour"]["expires_at"]) <= 3600
    assert listed["never"]["expires_at"] is None
    assert 2 * 86400 - 10 < seconds_from_now(listed["default"]["expires_at"]) <= 2 * 86400
    # Each write replaces the expiry; asset state never expires unless asked.
    api.put(run.ti("submit", key_url("hour")), json={"value": 2, "ttl": "never"}, headers=user)
    assert api.get(run.ti("submit", key_url("hour")), headers=user).json()["expires_at"] is None
    assert api.put(asset_url(asset, key_url("w")), json={"value": 1}, headers=op).json()["expires_at"] is None
    kept = api.put(asset_url(asset, key_url("t")), json={"value": 1, "ttl": 60.5}, headers=op).json()
    assert 50 < seconds_from_now(kept["expires_at"]) <= 60.5
    assert api.get(asset_url(asset, key_url("t")), headers=op).json()["expires_at"] == kept["expires_at"]


@pytest.mark.parametrize("ttl", [0, -5, "forever", "3600", True, None, 10**12, [60]])
def test_a_ttl_that_is_not_positive_seconds_or_never_is_refused(api, as_role, run, ttl):
    response = api.put(run.ti("submit", key_url("k")), json={"value": 1, "ttl": ttl}, headers=as_role["user"])
    message = refused(response, 422, "invalid_request")
    assert "ttl must be a number of seconds greater than 0" in message and '"never"' in message
    refused(api.get(run.ti("submit", key_url("k")), headers=as_role["user"]), 404, "key_not_found")


def test_an_expired_key_is_never_listed_nor_gettable_and_counts_as_absent(api, as_role, run, backend):
    from datetime import UTC, datetime, timedelta

    user = as_role["user"]
    scope = run.scope("submit")
    past = datetime.now(UTC) - timedelta(seconds=1)
    backend.write(scope, "gone", '"old"', writer=None, expires_at=past)
    backend.write(scope, "count", "41", writer=None, expires_at=past)
    api.put(run.ti("submit", key_url("kept")), json={"value": 1}, headers=user)
    refused(api.get(run.ti("submit", key_url("gone")), headers=user), 404, "key_not_found")
    refused(api.get(run.ti("submit", "stateEntry?key=gone"), headers=user), 404, "key_not_found")
    listing = api.get(run.ti("submit"), headers=user).json()
    assert [entry["key"] for entry in listing["entries"]] == ["kept"] and listing["total_entries"] == 1
    assert api.get(run.ti("submit"), params={"key_prefix": "gone"}, headers=user).json()["entries"] == []
    counts = api.get(run.url, headers=user).json()["task_instances"]
    assert counts == [{"task_id": "submit", "map_index": -1, "key_count": 1}]
    # Expired counts as absent: a counter starts again from 0, `if_version=0` may create the key.
    assert (
        api.post(run.ti("submit", increment_url("count")), json={"by": 1}, headers=user).json()["value"] == 1
    )
    again = api.put(
        run.ti("submit", "stateEntry"),
        params={"key": "gone", "if_version": 0},
        json={"value": "new"},
        headers=user,
    )
    assert again.status_code == 200, again.text
    assert api.get(run.ti("submit", key_url("gone")), headers=user).json()["value"] == "new"


def test_if_version_writes_only_over_the_version_that_was_read(api, as_role, run, asset):
    for headers, url in (
        (as_role["user"], run.ti("submit", "stateEntry?key=wm")),
        (as_role["op"], asset_url(asset, key_url("wm"))),
    ):

        def put(value, if_version=None, *, url=url, headers=headers):
            query = "" if if_version is None else ("&" if "?" in url else "?") + f"if_version={if_version}"
            return api.put(url + query, json={"value": value}, headers=headers)

        created = put(10, 0)
        assert created.status_code == 200 and created.json()["version"] == 1, created.text
        lost = put(99, 0)
        assert lost.status_code == 409, lost.text
        assert lost.json()["detail"]["reason"] == "version_conflict"
        assert lost.json()["detail"]["stored_version"] == 1
        assert "at version 1" in lost.json()["detail"]["message"]
        assert put(11, 1).json()["version"] == 2
        stale = put(99, 1)
        assert stale.status_code == 409 and stale.json()["detail"]["stored_version"] == 2
        stored = api.get(url, headers=headers).json()
        assert (stored["value"], stored["version"]) == (11, 2)
        # Without if_version a write always wins, and still counts a version.
        assert put(12).json()["version"] == 3
        for bad in (-1, "one", 2**63):
            refused(put(1, bad), 422, "invalid_request")
        assert api.get(url, headers=headers).json()["value"] == 12


def test_increment_adds_and_refuses_what_is_not_an_integer(api, as_role, run, asset):
    user = as_role["user"]
    by_key, query_form = run.ti("submit", increment_url("rows/total")), run.ti("submit", "stateIncrement")
    # An empty body adds 1, as on the task API.
    assert api.post(by_key, headers=user).json() == {
        "key": "rows/total",
        "value": 1,
        "expires_at": ANY_TIME,
    }
    assert api.post(by_key, json={"by": 41}, headers=user).json()["value"] == 42
    by_query = api.post(query_form, params={"key": "rows/total"}, json={"by": -50}, headers=user)
    assert by_query.json()["value"] == -8
    stored = api.get(run.ti("submit", key_url("rows/total")), headers=user).json()
    assert stored["value"] == -8 and stored["version"] == 3
    never = api.post(by_key, json={"by": 0, "ttl": "never"}, headers=user).json()
    assert never["expires_at"] is None
    # A key that holds anything but an integer is left as it is.
    api.put(run.ti("submit", key_url("text")), json={"value": "12"}, headers=user)
    message = refused(api.post(run.ti("submit", increment_url("text")), headers=user), 422, "invalid_value")
    assert "not an integer" in message
    assert api.get(run.ti("submit", key_url("text")), headers=user).json()["value"] == "12"
    api.put(run.ti("submit", key_url("big")), json={"value": 2**63 - 1}, headers=user)
    refused(api.post(run.ti("submit", increment_url("big")), headers=user), 422, "invalid_value")
    for body in ({"by": 1.5}, {"by": "1"}, {"by": True}, {"by": 2**63}, {"by": 1, "step": 2}, [1]):
        refused(api.post(by_key, json=body, headers=user), 422, "invalid_request")
    assert api.get(run.ti("submit", key_url("rows/total")), headers=user).json()["value"] == -8
    # Asset state, and an unknown asset.
    op = as_role["op"]
    assert api.post(asset_url(asset, increment_url("n")), json={"by": 3}, headers=op).json()["value"] == 3
    assert api.post(asset_url(asset, "stateIncrement?key=n"), headers=op).json()["value"] == 4
    refused(api.post(asset_url(2**31 - 1, increment_url("n")), headers=op), 404, "asset_not_found")
    refused(api.post(run.ti("nope", increment_url("n")), headers=user), 404, "task_instance_not_found")


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and seconds_from_now(other) > 0


ANY_TIME = _AnyTime()


def test_concurrent_increments_through_the_api_lose_none(api, as_role, run, asset):
    from concurrent.futures import ThreadPoolExecutor

    user, op = as_role["user"], as_role["op"]

    def add(url: str, headers: dict[str, str]) -> list[int]:
        results = []
        for _ in range(25):
            response = api.post(url, json={"by": 1}, headers=headers)
            assert response.status_code == 200, response.text
            results.append(response.json()["value"])
        return results

    for url, headers in (
        (run.ti("submit", increment_url("hits")), user),
        (asset_url(asset, increment_url("hits")), op),
    ):
        with ThreadPoolExecutor(4) as pool:
            seen = [value for values in pool.map(add, [url] * 4, [headers] * 4) for value in values]
        # Every increment saw its own result: none was lost, none counted twice.
        assert sorted(seen) == list(range(1, 101))
    assert api.get(run.ti("submit", key_url("hits")), headers=user).json()["value"] == 100
    assert api.get(asset_url(asset, key_url("hits")), headers=op).json()["value"] == 100


def test_asset_state_shows_who_last_wrote_each_key(api, as_role, run, asset, backend):
    from airflow_shared.state import CLI_WRITER, AssetScope, StateWriter

    op = as_role["op"]
    by_task = StateWriter.task_try(run.dag_id, run.run_id, "partition", 1, 3)
    backend.write(AssetScope(asset), "watermark", '"2024-01-01"', writer=by_task)
    backend.write(AssetScope(asset), "by_cli", "1", writer=CLI_WRITER)
    entry = api.get(asset_url(asset, key_url("watermark")), headers=op).json()
    # An asset has no tries of its own: the writing task's try is in updated_by, not beside it.
    assert set(entry) == {"key", "value", "updated_at", "version", "expires_at", "updated_by"}
    assert entry["updated_by"] == {
        "kind": "task",
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "task_id": "partition",
        "map_index": 1,
        "try_number": 3,
    }
    nobody = {"dag_id": None, "run_id": None, "task_id": None, "map_index": None, "try_number": None}
    assert api.get(asset_url(asset, key_url("by_cli")), headers=op).json()["updated_by"] == {
        "kind": "cli",
        **nobody,
    }
    api.put(asset_url(asset, key_url("watermark")), json={"value": "2024-02-01"}, headers=op)
    api.post(asset_url(asset, increment_url("runs")), headers=op)
    listed = {entry["key"]: entry for entry in api.get(asset_url(asset), headers=op).json()["entries"]}
    assert listed["watermark"]["updated_by"] == {"kind": "api", **nobody}
    assert listed["runs"]["updated_by"] == {"kind": "api", **nobody}
    assert all("updated_by_try" not in listed_entry for listed_entry in listed.values())
    # Task state records the try (null for operators) and has no writer field.
    api.put(run.ti("submit", key_url("k")), json={"value": 1}, headers=op)
    task_entry = api.get(run.ti("submit", key_url("k")), headers=op).json()
    assert "updated_by" not in task_entry and task_entry["updated_by_try"] is None


class PlainBackend(BaseStateBackend):
    """A backend with none of the optional capabilities: no versions, expiry or increments."""

    store: ClassVar[dict[tuple[StateScope, str], str]] = {}

    def get(self, scope, key, *, session=None):
        return self.store.get((scope, key))

    def set(self, scope, key, value, *, session=None):
        self.store[(scope, key)] = value

    def delete(self, scope, key, *, session=None):
        self.store.pop((scope, key), None)

    def clear(self, scope, *, all_map_indices=False, session=None):
        for stored in [stored for stored in self.store if stored[0] == scope]:
            del self.store[stored]

    def keys(self, scope, *, session=None):
        return sorted(key for stored_scope, key in self.store if stored_scope == scope)


@pytest.mark.parametrize("backend", ["metastore"], indirect=True)  # the run's rows; state goes to Plain
def test_a_backend_without_a_capability_answers_501_and_the_default_retention_is_not_applied(
    api, as_role, run, monkeypatch
):
    from airflow_task_state.configured_backend import reset_state_backend

    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.PlainBackend")
    monkeypatch.setenv("AIRFLOW__STATE__DEFAULT_TASK_RETENTION", "1d")
    reset_state_backend()
    user = as_role["user"]
    try:
        plain = api.put(run.ti("submit", key_url("k")), json={"value": 1}, headers=user)
        assert plain.json() == {"key": "k", "version": None, "expires_at": None}
        entry = api.get(run.ti("submit", key_url("k")), headers=user).json()
        assert (entry["value"], entry["version"], entry["expires_at"]) == (1, None, None)
        for response, capability in (
            (api.put(run.ti("submit", key_url("k")), json={"value": 2, "ttl": 60}, headers=user), "expiry"),
            (
                api.put(
                    run.ti("submit", "stateEntry"),
                    params={"key": "k", "if_version": 1},
                    json={"value": 2},
                    headers=user,
                ),
                "versioned writes",
            ),
            (api.post(run.ti("submit", increment_url("n")), headers=user), "atomic increments"),
        ):
            message = refused(response, 501, "unsupported")
            assert capability in message and "PlainBackend does not support" in message
        assert api.get(run.ti("submit", key_url("k")), headers=user).json()["value"] == 1
        # "never" is what such a backend does anyway.
        assert (
            api.put(
                run.ti("submit", key_url("k")), json={"value": 3, "ttl": "never"}, headers=user
            ).status_code
            == 200
        )
    finally:
        reset_state_backend()


# --- who may do what -----------------------------------------------------------------------------


def every_route(run: Run, asset_id: int) -> list[tuple[str, str]]:
    """(method, URL) of every operator route, for the given run's `submit` task and asset."""
    return [
        ("GET", run.url),
        ("GET", run.ti("submit")),
        ("DELETE", run.ti("submit")),
        ("GET", run.ti("submit", key_url("k"))),
        ("PUT", run.ti("submit", key_url("k"))),
        ("DELETE", run.ti("submit", key_url("k"))),
        ("GET", run.ti("submit", "stateEntry?key=k")),
        ("PUT", run.ti("submit", "stateEntry?key=k")),
        ("DELETE", run.ti("submit", "stateEntry?key=k")),
        ("POST", run.ti("submit", increment_url("n"))),
        ("POST", run.ti("submit", "stateIncrement?key=n")),
        ("GET", f"{V1}/assets"),
        ("GET", asset_url(asset_id)),
        ("DELETE", asset_url(asset_id)),
        ("GET", asset_url(asset_id, key_url("k"))),
        ("PUT", asset_url(asset_id, key_url("k"))),
        ("DELETE", asset_url(asset_id, key_url("k"))),
        ("GET", asset_url(asset_id, "stateEntry?key=k")),
        ("PUT", asset_url(asset_id, "stateEntry?key=k")),
        ("DELETE", asset_url(asset_id, "stateEntry?key=k")),
        ("POST", asset_url(asset_id, increment_url("n"))),
        ("POST", asset_url(asset_id, "stateIncrement?key=n")),
    ]


def call(api, method: str, url: str, headers: dict[str, str] | None = None, **kwargs):
    body = {"json": {"value": "v"}} if method == "PUT" else {"json": {"by": 1}} if method == "POST" else {}
    return api.request(method, url, headers=headers or {}, **body, **kwargs)


def test_a_viewer_reads_everything_and_may_change_nothing(api, as_role, run, asset):
    as_role_admin = as_role["admin"]
    api.put(run.ti("submit", key_url("k")), json={"value": "v"}, headers=as_role_admin)
    api.put(asset_url(asset, key_url("k")), json={"value": "v"}, headers=as_role_admin)
    for method, url in every_route(run, asset):
        response = call(api, method, url, as_role["viewer"])
        if method == "GET":
            assert response.status_code == 200, (url, response.text)
        else:
            message = refused(response, 403, "forbidden")
            verb = "deleting" if method == "DELETE" else "editing"
            permission = "delete" if method == "DELETE" else "edit"
            if "/dags/" in url:
                assert message == (
                    f"{verb} task state of DAG {run.dag_id!r} needs {permission} permission"
                    " on its task instances"
                )
            else:
                assert message == f"{verb} the state of asset {asset} needs {permission} permission on assets"
    # Nothing changed.
    assert api.get(run.ti("submit", key_url("k")), headers=as_role["viewer"]).json()["value"] == "v"
    listing = api.get(run.ti("submit"), headers=as_role["viewer"]).json()
    assert (listing["can_edit"], listing["can_delete"]) == (False, False)
    assets = api.get(asset_url(asset), headers=as_role["viewer"]).json()
    assert (assets["can_edit"], assets["can_delete"]) == (False, False)


@pytest.mark.parametrize(
    ("role", "task_writes", "asset_writes"),
    [("user", True, False), ("op", True, True), ("admin", True, True)],
)
def test_roles_that_edit_task_state_and_asset_state(
    api, as_role, run, asset, role, task_writes, asset_writes
):
    headers = as_role[role]
    for method, url in every_route(run, asset):
        if method == "GET":
            continue
        allowed = task_writes if "/dags/" in url else asset_writes
        response = call(api, method, url, headers)
        if allowed:
            assert response.status_code in (200, 204), (url, response.text)
        else:
            assert "permission on assets" in refused(response, 403, "forbidden")
    for url, allowed in ((run.ti("submit"), task_writes), (asset_url(asset), asset_writes)):
        listing = api.get(url, headers=headers).json()
        assert (listing["can_edit"], listing["can_delete"]) == (allowed, allowed)


def test_without_a_token_every_route_is_401(api, run, asset):
    for method, url in every_route(run, asset):
        response = call(api, method, url)
        message = refused(response, 401, "unauthenticated")
        assert "Not authenticated" in message and "POST /auth/token" in message
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_write_without_a_token_is_refused_before_its_body_is_read(api, run, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "10")
    response = api.put(
        run.ti("submit", key_url("k")), content="x" * 100_000, headers={"Content-Type": "application/json"}
    )
    refused(response, 401, "unauthenticated")


def test_expired_garbage_and_forged_tokens_are_refused(api, mint, run, asset):
    import jwt

    expired = mint("admin", expiration_time_in_seconds=-3600)
    forged = jwt.encode(
        {"sub": "admin", "role": "admin", "aud": "apache-airflow", "exp": 2_000_000_000},
        "not-the-secret-" + "x" * 50,
        algorithm="HS512",
    )
    for method, url in every_route(run, asset):
        message = refused(
            call(api, method, url, {"Authorization": f"Bearer {expired}"}), 401, "unauthenticated"
        )
        assert "Token Expired" in message
        for bad in ("garbage", forged):
            response = call(api, method, url, {"Authorization": f"Bearer {bad}"})
            assert "not valid" in refused(response, 403, "forbidden")


def test_the_ui_cookie_authenticates_like_the_bearer_token(api, mint, run, asset):
    cookies = {"_token": mint("user")}
    put = api.put(run.ti("submit", key_url("k")), json={"value": "from the UI"}, cookies=cookies)
    assert put.status_code == 200
    assert api.get(run.ti("submit", "stateEntry?key=k"), cookies=cookies).json()["value"] == "from the UI"
    refused(api.put(asset_url(asset, key_url("k")), json={"value": 1}, cookies=cookies), 403, "forbidden")
    refused(api.get(run.ti("submit"), cookies={"_token": "garbage"}), 403, "forbidden")
    api.cookies.clear()


# --- the schema ----------------------------------------------------------------------------------


def test_the_openapi_schema_documents_every_operator_route(api):
    paths = api.get("/openapi.json").json()["paths"]
    run = "/api/v1/dags/{dag_id}/dagRuns/{dag_run_id}"
    ti = run + "/taskInstances/{task_id}"
    expected = {
        run + "/state": {"get"},
        ti + "/state": {"get", "delete"},
        ti + "/stateEntry": {"get", "put", "delete"},
        "/api/v1/assets": {"get"},
        "/api/v1/assets/{asset_id}/state": {"get", "delete"},
        "/api/v1/assets/{asset_id}/stateEntry": {"get", "put", "delete"},
        ti + "/stateIncrement": {"post"},
        "/api/v1/assets/{asset_id}/stateIncrement": {"post"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) == methods, path
        for method in methods:
            operation = paths[path][method]
            assert operation["summary"] and operation["description"], (path, method)
            assert {"401", "403", "404", "422"} <= set(operation["responses"]), (path, method)
            if method == "put":
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert body["required"] == ["value"] and set(body["properties"]) == {"value", "ttl"}
                assert {"409", "501"} <= set(operation["responses"]), (path, method)
                assert {p["name"] for p in operation["parameters"]} >= {"if_version"}
            if method == "post":
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert set(body["properties"]) == {"by", "ttl"} and "501" in operation["responses"]
            if path.endswith(("stateEntry", "stateIncrement")):
                assert "key" in [p["name"] for p in operation["parameters"] if p["in"] == "query"]
    listing = paths[ti + "/state"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"map_index", "limit", "offset", "key_prefix"}
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["StateEntryResponse"]["properties"]["updated_by_try"]["description"]
    for field in ("version", "expires_at"):
        assert schemas["StateEntryResponse"]["properties"][field]["description"]
    assert schemas["AssetStateEntryResponse"]["properties"]["updated_by"]
    assert "updated_by_try" not in schemas["AssetStateEntryResponse"]["properties"]
    assert set(schemas["WriterResponse"]["properties"]) == {
        "kind",
        "dag_id",
        "run_id",
        "task_id",
        "map_index",
        "try_number",
    }


# --- the two kinds of credential do not cross ----------------------------------------------------


def test_a_task_credential_opens_no_operator_route_and_an_operator_token_no_task_route(
    api, as_role, run, monkeypatch
):
    """
    What task code holds (a state credential for its own task instance) is not an Airflow user:
    it reads no state through the operators' API, even its own. And an operator's Airflow token,
    even an admin's, is not a task's credential on the task-facing routes.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential
    from airflow_task_state.api.signing_keys import forget_configured_keys, signing_key
    from sqlalchemy import select

    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "operator-api-test-session-key-" + "k" * 40)
    forget_configured_keys()
    with create_session() as session:
        ti_id = str(
            session.scalar(
                select(TaskInstance.id).where(
                    TaskInstance.dag_id == run.dag_id, TaskInstance.task_id == "submit"
                )
            )
        )
    claims = TaskInstanceClaims(ti_id, run.dag_id, run.run_id, "submit", -1, 2)
    task_credential = {"Authorization": f"Bearer {issue_credential(claims, signing_key())}"}
    try:
        # The credential works where it belongs...
        assert api.get(f"/task-instances/{ti_id}/keys", headers=task_credential).status_code == 200
        # ...and nowhere on the operators' API.
        refused(api.get(run.ti("submit"), headers=task_credential), 403, "forbidden")
        refused(
            api.put(run.ti("submit", key_url("k")), json={"value": 1}, headers=task_credential),
            403,
            "forbidden",
        )
        # An admin's Airflow token is no task credential.
        refused(api.get(f"/task-instances/{ti_id}/keys", headers=as_role["admin"]), 401, "invalid_token")
    finally:
        forget_configured_keys()
