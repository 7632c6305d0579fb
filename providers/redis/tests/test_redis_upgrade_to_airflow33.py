"""
Redis users upgrade to Airflow 3.3 without moving data: with ``[state] backend =
airflow_state_redis.RedisStateBackend`` kept as it was on 3.2, and Airflow 3.3's ``[state_store]
backend`` set to this project's adapter (``airflow_task_state.state_store_backend.StateStoreBackend``),
Airflow 3.3's own backend calls (its Execution API's, its ``airflow state-store clean``'s) and a 3.3
task's ``context["task_state_store"]`` read and write the very Redis keys our API does.

Everything 3.3-side runs in the real Airflow 3.3.2 environment (``state_testing.airflow33``), on a
database of this module's own: migrated by 3.2's ``airflow db migrate``, given dag runs by 3.2's
``airflow dags test`` (whose task stores a job id in Redis through our task state), then migrated
by 3.3's. This process plays our API with ``RedisStateBackend`` itself, on the keys of the
``dag_run_uid`` 3.2's own code computes for those runs.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy
from airflow_shared.state import AssetScope, TaskScope
from airflow_state_redis import RedisStateBackend
from state_testing import dbservers
from state_testing.airflow33 import Airflow33, airflow33
from state_testing.airflow_cli import run_checked

HERE = Path(__file__).parent / "airflow33"
DAGS = HERE / "dags"
DAG_ID = "redis_upgrade"
STATE_STORE_BACKEND = "airflow_task_state.state_store_backend.StateStoreBackend"
STATE_BACKEND = "airflow_state_redis.RedisStateBackend"
RESOLVED_STATE_BACKEND = "airflow_state_redis.backend.RedisStateBackend"
ASSET_ID = 4242


@dataclass(frozen=True)
class Upgraded:
    """A 3.3 deployment on a database whose dag runs 3.2 created; *uids* as 3.2 computed them."""

    af33: Airflow33
    env: dict[str, str]
    run1: str
    run2: str
    uids: dict[str, str]
    prefix: str
    redis_url: str
    database: str

    def ops(self, *operations: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
        """Apply *operations* through Airflow 3.3's own configured store (``airflow33/ops.py``)."""
        spec = tmp / f"ops-{uuid.uuid4().hex}.json"
        spec.write_text(json.dumps(operations))
        result = self.af33.run("python", HERE / "ops.py", spec, env=self.env, timeout=120)
        [line] = [line for line in result.stdout.splitlines() if line.startswith("OPS-RESULTS ")]
        return json.loads(line.removeprefix("OPS-RESULTS "))

    def ours(self) -> RedisStateBackend:
        """Our backend, as both deployments configure it (same server and prefix): what our API reads."""
        return RedisStateBackend(
            self.redis_url, key_prefix=self.prefix, task_ttl_seconds=3600, asset_ttl_seconds=None
        )

    def scope(self, run_id: str, task_id: str, map_index: int = -1) -> TaskScope:
        return TaskScope(DAG_ID, run_id, task_id, map_index, dag_run_uid=self.uids[run_id])


def _task(run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
    return {"task": [DAG_ID, run_id, task_id, map_index]}


def _asset(asset_id: int) -> dict[str, Any]:
    return {"asset": {"asset_id": asset_id}}


ASSET = _asset(ASSET_ID)


@pytest.fixture(scope="module")
def database33(db_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database of this module's own (3.3's migration must not touch the session's database)."""
    with dbservers.scratch_database(db_kind, tmp_path_factory.mktemp("af33-db")) as url:
        yield url


def _run32(*command: str, env: dict[str, str]) -> str:
    return run_checked(list(command), env=env, label="Airflow 3.2", timeout=300).stdout


def _redis_settings(redis_url: str, prefix: str) -> dict[str, str]:
    """What a Redis user configures, on 3.2 and unchanged on 3.3."""
    return {
        "AIRFLOW__STATE__BACKEND": STATE_BACKEND,
        "AIRFLOW__STATE_REDIS__URL": redis_url,
        "AIRFLOW__STATE_REDIS__KEY_PREFIX": prefix,
        "AIRFLOW__STATE_REDIS__TASK_TTL_SECONDS": "3600",
    }


@pytest.fixture(scope="module")
def upgraded(database33: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Upgraded:
    af33 = airflow33()
    prefix = f"upgrade-{uuid.uuid4().hex[:10]}"
    # Airflow 3.2 with airflow-task-state and Redis (this environment): schema, then two real dag runs.
    home32 = tmp_path_factory.mktemp("home32")
    env32 = {
        **os.environ,
        "AIRFLOW_HOME": str(home32),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database33,
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        **_redis_settings(redis_url, prefix),
    }
    airflow32 = str(Path(sys.executable).with_name("airflow"))
    _run32(airflow32, "db", "migrate", env=env32)
    for date in ("2024-01-01", "2024-01-02"):
        _run32(airflow32, "dags", "test", DAG_ID, date, env=env32)
    uids = json.loads(
        _run32(sys.executable, str(HERE / "uids32.py"), DAG_ID, env=env32).strip().splitlines()[-1]
    )
    run1, run2 = sorted(uids)
    # Then the upgrade: Airflow 3.3's migration on the same database; [state] and [state_redis] as
    # they were, and Airflow's own store through this project's adapter.
    env33 = af33.env(
        database33,
        tmp_path_factory.mktemp("home33"),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__STATE_STORE__BACKEND=STATE_STORE_BACKEND,
        **_redis_settings(redis_url, prefix),
    )
    af33.run("airflow", "db", "migrate", env=env33)
    return Upgraded(af33, env33, run1, run2, uids, prefix, redis_url, database33)


def test_airflow33_resolves_its_store_to_the_adapter_and_ours_to_redis(upgraded: Upgraded, tmp_path: Path):
    # resolve_state_backend() raises TypeError for a class that is not a BaseStoreBackend.
    [resolved] = upgraded.ops({"op": "backends"}, tmp=tmp_path)
    expected = {"state_store": STATE_STORE_BACKEND, "state": RESOLVED_STATE_BACKEND}
    assert resolved == {"value": expected}, resolved


def test_state_written_on_32_reads_the_same_on_33_and_back(upgraded: Upgraded, tmp_path: Path) -> None:
    ours = upgraded.ours()
    run = upgraded.run1
    job = {"app": "app_001", "note": "naïve ☃ 日本"}
    big = "x" * 65536
    written = {
        (run, "carry", -1): {"remote_job_id": job, "big": big},
        (run, "carry", 3): {"remote_job_id": {"shard": 3}},
    }
    for (run_id, task_id, map_index), values in written.items():
        for key, value in values.items():
            # Compact JSON with non-ASCII kept, as the 3.2 task side stores it.
            ours.write(
                upgraded.scope(run_id, task_id, map_index),
                key,
                json.dumps(value, ensure_ascii=False, separators=(",", ":")),
            )
    ours.write(AssetScope(ASSET_ID), "watermark", json.dumps("2024-01-01T00:00:00+00:00"))
    ours.write(AssetScope(ASSET_ID), "clé ☃", json.dumps({"n": 1}))
    version_before = ours.get_versioned(upgraded.scope(run, "carry"), "remote_job_id")
    assert version_before is not None

    results = upgraded.ops(
        {"op": "get", "scope": _task(run, "carry"), "key": "remote_job_id"},
        {"op": "get", "scope": _task(run, "carry"), "key": "big", "session": True},
        {"op": "aget", "scope": _task(run, "carry", 3), "key": "remote_job_id"},
        {"op": "get", "scope": ASSET, "key": "watermark"},
        {"op": "aget", "scope": ASSET, "key": "clé ☃", "session": True},
        {"op": "get", "scope": _task(run, "carry", 0), "key": "remote_job_id"},
        # And 3.3 writes as its Execution API does: json.dumps(value), default arguments.
        {"op": "set", "scope": _task(run, "carry"), "key": "remote_job_id", "value": json.dumps("app_002")},
        {"op": "aset", "scope": _task(run, "carry", 3), "key": "new ☃", "value": json.dumps([1, "é"])},
        {"op": "set", "scope": ASSET, "key": "watermark", "value": json.dumps("2024-02-01"), "session": True},
        tmp=tmp_path,
    )
    assert all("error" not in result for result in results), results
    values = [None if r["value"] is None else json.loads(r["value"]) for r in results[:6]]
    assert values == [job, big, {"shard": 3}, "2024-01-01T00:00:00+00:00", {"n": 1}, None]

    # The 3.2 backend reads what 3.3 wrote, on the same keys, and the versions continue.
    after = ours.get_versioned(upgraded.scope(run, "carry"), "remote_job_id")
    assert after is not None and json.loads(after.value) == "app_002"
    assert after.version == version_before.version + 1
    assert json.loads(ours.get(upgraded.scope(run, "carry", 3), "new ☃") or "null") == [1, "é"]
    assert json.loads(ours.get(AssetScope(ASSET_ID), "watermark") or "null") == "2024-02-01"
    ours.close()


def test_delete_clear_expiry_and_cleanup(
    upgraded: Upgraded, tmp_path: Path, redis_client: redis.Redis
) -> None:
    ours = upgraded.ours()
    run = upgraded.run1
    for map_index in (-1, 0, 1, 2):
        for key in ("a", "b"):
            ours.write(upgraded.scope(run, "ops", map_index), key, json.dumps(map_index))
    ours.write(AssetScope(ASSET_ID + 1), "a", "1")
    ours.write(AssetScope(ASSET_ID + 1), "b", "2")
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)

    results = upgraded.ops(
        {"op": "delete", "scope": _task(run, "ops", 0), "key": "a"},
        {"op": "adelete", "scope": _task(run, "ops", 0), "key": "missing", "session": True},
        {"op": "clear", "scope": _task(run, "ops", 1)},
        {"op": "adelete", "scope": _asset(ASSET_ID + 1), "key": "a"},
        {"op": "set", "scope": _task(run, "ttl"), "key": "gone", "value": "1", "expires_at": past},
        {"op": "get", "scope": _task(run, "ttl"), "key": "gone"},
        {
            "op": "aset",
            "scope": _task(run, "ttl"),
            "key": "kept",
            "value": "2",
            "expires_at": later.isoformat(),
        },
        tmp=tmp_path,
    )
    assert all("error" not in result for result in results), results
    assert results[5]["value"] is None  # expired: hidden at once (3.3's own backend still returns it)
    assert ours.get(upgraded.scope(run, "ops", 0), "a") is None
    assert ours.get(upgraded.scope(run, "ops", 0), "b") == "0"
    assert ours.keys(upgraded.scope(run, "ops", 1)) == []
    assert ours.keys(upgraded.scope(run, "ops", 2)) == ["a", "b"]
    assert ours.keys(AssetScope(ASSET_ID + 1)) == ["b"]
    [kept] = ours.entries(upgraded.scope(run, "ttl")).entries
    assert (kept.key, kept.expires_at) == ("kept", later)

    # The expired key is still in Redis until cleanup() removes it; the one that expires later stays.
    ttl_hash = f"{upgraded.prefix}:task:{{{DAG_ID}:{_quoted(run)}:{_quoted(upgraded.uids[run])}:ttl}}:-1"
    assert redis_client.hexists(ttl_hash, "gone")
    results = upgraded.ops(
        {"op": "cleanup"},
        {"op": "clear", "scope": _task(run, "ops", -1), "all_map_indices": True, "session": True},
        {"op": "aclear", "scope": _asset(ASSET_ID + 1)},
        tmp=tmp_path,
    )
    assert all("error" not in result for result in results), results
    assert not redis_client.hexists(ttl_hash, "gone")
    assert redis_client.hexists(ttl_hash, "kept")
    assert [ours.keys(upgraded.scope(run, "ops", i)) for i in (-1, 0, 1, 2)] == [[], [], [], []]
    assert ours.keys(AssetScope(ASSET_ID + 1)) == []
    ours.close()


def _quoted(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")


def test_bad_scopes_are_refused_with_the_reason(upgraded: Upgraded, tmp_path: Path) -> None:
    results = upgraded.ops(
        {"op": "set", "scope": _task("no-such-run", "t"), "key": "k", "value": "1"},
        {"op": "aset", "scope": _task("no-such-run", "t"), "key": "k", "value": "1"},
        {"op": "get", "scope": _task("no-such-run", "t"), "key": "k"},
        {"op": "get", "scope": {"asset": {"name": "orders"}}, "key": "k"},
        tmp=tmp_path,
    )
    assert results[0]["error"].startswith("ValueError: No DagRun found for dag_id='redis_upgrade'")
    assert results[1]["error"].startswith("ValueError: No DagRun found")
    assert results[2] == {"value": None}
    assert results[3]["error"].startswith(f"ValueError: {STATE_STORE_BACKEND} runs on the API server")


def test_a_real_33_task_reads_what_its_32_try_stored_and_writes_where_ours_reads(
    upgraded: Upgraded, tmp_path: Path
) -> None:
    ours = upgraded.ours()
    scope = upgraded.scope(upgraded.run1, "watch")
    # What 3.2's `airflow dags test` stored through our task state, in Redis.
    assert json.loads(ours.get(scope, "remote_job_id") or "null") == "app_001"
    out = tmp_path / "watch.json"
    env = {**upgraded.env, "STATE_UPGRADE_OUT": str(out)}
    upgraded.af33.run("airflow", "tasks", "test", DAG_ID, "watch", upgraded.run1, env=env, timeout=180)
    assert json.loads(out.read_text()) == {"remote_job_id": "app_001"}
    [written] = [entry for entry in ours.entries(scope).entries if entry.key == "written_on_33"]
    assert json.loads(written.value) == {"by": "context['task_state_store']"}
    assert written.updated_by_try == 1  # the try that wrote it, as our API records it
    ours.close()
    # Our CLI shows both; Airflow 3.3's REST API and UI read its tables, which hold nothing of Redis.
    listed = upgraded.af33.run(
        "airflow",
        "state",
        "list",
        "--dag-id",
        DAG_ID,
        "--run-id",
        upgraded.run1,
        "--task-id",
        "watch",
        env=upgraded.env,
    ).stdout
    assert "remote_job_id" in listed and "written_on_33" in listed, listed
    engine = sqlalchemy.create_engine(upgraded.database, poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as connection:
        for table in ("task_state_store", "asset_state_store"):
            assert connection.scalar(sqlalchemy.text(f"SELECT COUNT(*) FROM {table}")) == 0
    engine.dispose()


def test_a_run_deleted_and_created_again_starts_empty(upgraded: Upgraded, tmp_path: Path) -> None:
    ours = upgraded.ours()
    old_scope = upgraded.scope(upgraded.run2, "watch")
    ours.write(old_scope, "remote_job_id", '"app_from_the_deleted_run"')
    results = upgraded.ops(
        {"op": "get", "scope": _task(upgraded.run2, "watch"), "key": "remote_job_id"},
        {"op": "recreate_run", "run": [DAG_ID, upgraded.run2]},
        {"op": "get", "scope": _task(upgraded.run2, "watch"), "key": "remote_job_id"},
        {"op": "aget", "scope": _task(upgraded.run2, "watch"), "key": "remote_job_id"},
        # The run exists again under the same run_id: writes to it are accepted.
        {"op": "set", "scope": _task(upgraded.run2, "watch"), "key": "remote_job_id", "value": '"new"'},
        tmp=tmp_path,
    )
    assert results == [
        {"value": '"app_from_the_deleted_run"'},
        {"value": None},
        {"value": None},
        {"value": None},
        {"value": None},
    ]
    # The deleted incarnation's keys are untouched (they age out with task_ttl_seconds).
    assert ours.get(old_scope, "remote_job_id") == '"app_from_the_deleted_run"'
    ours.close()
