"""
Run by Airflow 3.3's interpreter (without airflow-task-state) on the upgrade test's database: reads
back, through Airflow 3.3's own configured state backend (``airflow.state.get_state_backend()``),
every (scope, key) of the JSON file given as the first argument, and prints as JSON what it read,
with the row's stored text and metadata from Airflow 3.3's own ORM models. The test compares.

The input is fill_state_32.py's dump: {"task": [...], "asset": [...], "expired": {...}}.
The output: {"backend": "<class>", "task": [[value text or null, row or null], ...] in input
order, "asset": [...], "expired": {"task": [text or null...], "asset": [...]}}.
"""

from __future__ import annotations

import json
import sys

from airflow.models.asset_state_store import AssetStateStoreModel
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.utils.session import create_session
from airflow_task_state import AssetScope, TaskScope, get_state_backend
from sqlalchemy import select


def _task_scope(item: dict) -> TaskScope:
    return TaskScope(item["dag_id"], item["run_id"], item["task_id"], item["map_index"])


def _task_row(session, item: dict) -> dict | None:
    row = session.scalar(
        select(TaskStateStoreModel).where(
            TaskStateStoreModel.dag_id == item["dag_id"],
            TaskStateStoreModel.run_id == item["run_id"],
            TaskStateStoreModel.task_id == item["task_id"],
            TaskStateStoreModel.map_index == item["map_index"],
            TaskStateStoreModel.key == item["key"],
        )
    )
    if row is None:
        return None
    return {
        "key": row.key,
        "value": row.value,
        "updated_at": row.updated_at.isoformat(),
        "expires_at": row.expires_at.isoformat() if row.expires_at else None,
    }


def _asset_row(session, item: dict) -> dict | None:
    row = session.scalar(
        select(AssetStateStoreModel).where(
            AssetStateStoreModel.asset_id == item["asset_id"], AssetStateStoreModel.key == item["key"]
        )
    )
    if row is None:
        return None
    return {
        "key": row.key,
        "value": row.value,
        "updated_at": row.updated_at.isoformat(),
        "writer": {
            "kind": row.last_updated_by_kind,
            "dag_id": row.last_updated_by_dag_id,
            "run_id": row.last_updated_by_run_id,
            "task_id": row.last_updated_by_task_id,
            "map_index": row.last_updated_by_map_index,
        },
    }


def main(expected_path: str) -> None:
    with open(expected_path, encoding="utf-8") as source:
        expected = json.load(source)
    backend = get_state_backend()
    read: dict = {"backend": f"{type(backend).__module__}.{type(backend).__qualname__}"}
    with create_session() as session:
        read["task"] = [
            [backend.get(_task_scope(item), item["key"]), _task_row(session, item)]
            for item in expected["task"]
        ]
        read["asset"] = [
            [backend.get(AssetScope(asset_id=item["asset_id"]), item["key"]), _asset_row(session, item)]
            for item in expected["asset"]
        ]
        read["expired"] = {
            "task": [backend.get(_task_scope(item), item["key"]) for item in expected["expired"]["task"]],
            "asset": [
                backend.get(AssetScope(asset_id=item["asset_id"]), item["key"])
                for item in expected["expired"]["asset"]
            ],
        }
    json.dump(read, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main(sys.argv[1])
