"""
Run by Airflow 3.3's interpreter (the cached environment, with airflow-task-state) on the upgrade
test's database once ``airflow db migrate`` moved the state: reads every key of the JSON file given
as the first argument (fill_state_32.py's dump) through both APIs, and writes what each read as
JSON to the path given as the second (Airflow logs to stdout).

- ours (``airflow_task_state.get_state_backend()``): the entry, with version, expiry and writer;
- Airflow 3.3's own (``airflow.state.get_state_backend()``, its default ``[state_store] backend``):
  the value, as its task accessors and Execution API get it;
- Airflow 3.3's REST API (its list route, in-process) for one task instance: what its UI shows.

Output: {"ours": {"task": [entry or null, ...], "asset": [...]}, "airflow": {"task": [value or null,
...], "asset": [...]}, "keys": {"dag/run/task/map index": [our keys() of it]}, "expired": [our reads
of the keys written to expire], "rest": {...}}.
"""

from __future__ import annotations

import json
import os
import sys

# Airflow's REST API answers as to an admin (its SimpleAuthManager then issues a token per request).
os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"

from airflow.state import AssetScope as AirflowAssetScope
from airflow.state import TaskScope as AirflowTaskScope
from airflow.state import get_state_backend as airflow_backend
from airflow_shared.state import AssetScope, TaskScope
from airflow_task_state import get_state_backend


def _task(item: dict) -> tuple[TaskScope, AirflowTaskScope]:
    where = (item["dag_id"], item["run_id"], item["task_id"], item["map_index"])
    return TaskScope(*where), AirflowTaskScope(*where)


def _entry(entry) -> dict | None:
    if entry is None:
        return None
    return {
        "key": entry.key,
        "value": entry.value,
        "version": entry.version,
        "updated_at": entry.updated_at.isoformat(),
        "expires_at": entry.expires_at.isoformat() if entry.expires_at else None,
        "updated_by_try": entry.updated_by_try,
        "writer": None if entry.writer is None else str(entry.writer),
    }


def _rest_list(dag_id: str, run_id: str, task_id: str, map_index: int) -> dict:
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app("core"))
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/state-store"
    answer = client.get(path, params={"map_index": map_index, "limit": 1000})
    return {"status": answer.status_code, "body": answer.json()}


def main(expected_path: str, out_path: str) -> None:
    with open(expected_path, encoding="utf-8") as source:
        expected = json.load(source)
    ours, airflow = get_state_backend(), airflow_backend()
    read: dict = {"ours": {"task": [], "asset": []}, "airflow": {"task": [], "asset": []}}
    for item in expected["task"]:
        scope, airflow_scope = _task(item)
        read["ours"]["task"].append(_entry(ours.get_entry(scope, item["key"])))
        read["airflow"]["task"].append(airflow.get(airflow_scope, item["key"]))
    for item in expected["asset"]:
        read["ours"]["asset"].append(_entry(ours.get_entry(AssetScope(item["asset_id"]), item["key"])))
        read["airflow"]["asset"].append(
            airflow.get(AirflowAssetScope(asset_id=item["asset_id"]), item["key"])
        )
    # Each task instance's keys, as our API lists them: "dag/run/task/map index" -> keys.
    scopes = {
        tuple(item[name] for name in ("dag_id", "run_id", "task_id", "map_index"))
        for item in expected["task"]
    }
    read["keys"] = {"/".join(map(str, scope)): ours.keys(TaskScope(*scope)) for scope in sorted(scopes)}
    run_id = expected["run_id"]
    read["expired"] = [
        ours.get(TaskScope("upgrade_state", run_id, "run_job"), "expired/one"),
        *(ours.get(AssetScope(asset_id), "expired/one") for asset_id in expected["assets"]),
    ]
    read["rest"] = _rest_list("upgrade_state", run_id, "process", 1)
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(read, out, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
