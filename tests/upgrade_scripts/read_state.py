"""
Run on the upgrade test's database by either line's interpreter: after the upgrade by Airflow 3.3's
(the cached environment, with airflow-task-state), after the rollback by Airflow 3.2's. Reads every
key of the JSON file given as the first argument (fill_state_32.py's dump) and writes what it read
as JSON to the path given as the second (Airflow logs to stdout):

- ``ours``: through our backend (``airflow_task_state.get_state_backend()``), each entry with its
  version, expiry and writer; ``keys``: each task instance's keys as our API lists them;
  ``expired``: our reads of the keys written to expire;
- ``large``: each large value (the dump's ``large``), as task code reads it through our API: the
  value the reference names, read from ``[state] object_storage_path`` and checked (its kind and
  BLAKE3, or the error);
- on Airflow 3.3 also ``airflow``: through Airflow's own backend (``airflow.state.get_state_backend()``,
  its default ``[state_store] backend``), the value its task accessors and Execution API get; and
  ``rest``: Airflow's REST API (its list route, in-process) for one task instance, as its UI shows it.
"""

from __future__ import annotations

import json
import os
import sys

# Airflow's REST API answers as to an admin (its SimpleAuthManager then issues a token per request).
os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"

import blake3
from airflow_shared.state import AssetScope
from airflow_task_state import get_state_backend, large_values, task_scope
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE
from entries import entry_record  # beside this script

SCOPE = ("dag_id", "run_id", "task_id", "map_index")


def _entry(entry) -> dict | None:
    return None if entry is None else entry_record(entry)


def read_ours(expected: dict) -> dict:
    ours = get_state_backend()
    scopes = {
        where: task_scope(*where) for where in {tuple(item[n] for n in SCOPE) for item in expected["task"]}
    }
    task = [
        _entry(ours.get_entry(scopes[tuple(item[n] for n in SCOPE)], item["key"]))
        for item in expected["task"]
    ]
    asset = [_entry(ours.get_entry(AssetScope(item["asset_id"]), item["key"])) for item in expected["asset"]]
    run_job = task_scope("upgrade_state", expected["run_id"], "run_job")
    expired = [ours.get(run_job, "expired/one")]
    expired += [ours.get(AssetScope(asset_id), "expired/one") for asset_id in expected["assets"]]
    keys = {"/".join(map(str, where)): ours.keys(scope) for where, scope in sorted(scopes.items())}
    found = {"ours": {"task": task, "asset": asset}, "keys": keys, "expired": expired}
    return found | {"large": _read_large(expected, task + asset)}


def _read_large(expected: dict, entries: list) -> dict[str, dict[str, str]]:
    """What task code's get() and get_bytes() return for each large value (worker.large, which they call)."""
    from airflow_task_state.worker import large

    read: dict[str, dict[str, str]] = {}
    for item, entry in zip(expected["task"] + expected["asset"], entries, strict=True):
        if item["key"] not in expected.get("large", {}):
            continue
        try:
            value = json.loads(entry["value"])
            if large_values.parse(value).kind == "json":
                content = json.dumps(large.load(value, item["key"], "read")).encode()
            else:
                content = large.read_bytes(large.file_reference(value, item["key"], "read"))
            kind = large_values.parse(value).kind
            read[item["key"]] = {"kind": kind, "blake3": blake3.blake3(content).hexdigest()}
        except Exception as error:  # written down: the test shows it
            read[item["key"]] = {"error": repr(error)}
    return read


def read_airflows(expected: dict) -> dict:
    from airflow.state import AssetScope as AirflowAssetScope
    from airflow.state import TaskScope as AirflowTaskScope
    from airflow.state import get_state_backend as airflow_backend

    airflow = airflow_backend()
    task = [
        airflow.get(AirflowTaskScope(*(item[n] for n in SCOPE)), item["key"]) for item in expected["task"]
    ]
    asset = [
        airflow.get(AirflowAssetScope(asset_id=item["asset_id"]), item["key"]) for item in expected["asset"]
    ]
    return {"airflow": {"task": task, "asset": asset}, "rest": _rest_list(expected["run_id"], "process", 1)}


def _rest_list(run_id: str, task_id: str, map_index: int) -> dict:
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app("core"))
    path = f"/api/v2/dags/upgrade_state/dagRuns/{run_id}/taskInstances/{task_id}/state-store"
    answer = client.get(path, params={"map_index": map_index, "limit": 100})
    return {"status": answer.status_code, "body": answer.json()}


def main(expected_path: str, out_path: str) -> None:
    with open(expected_path, encoding="utf-8") as source:
        expected = json.load(source)
    read = read_ours(expected)
    if AIRFLOW_HAS_STATE_STORE:
        read |= read_airflows(expected)
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(read, out, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
