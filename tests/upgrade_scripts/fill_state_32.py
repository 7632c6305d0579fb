"""
Run by Airflow 3.2's interpreter (this repository's venv) on the upgrade test's database, after the
test DAGs ran: fills our task_state and asset_state the way server code does (the configured
backend, complete scopes from ``airflow_task_state.task_scope``), then writes what our backend reads
back, the live content an upgrade must carry, as JSON to the path given as the only argument.

What it writes, on every task instance of every dag run: keys that paths and collations mangle
(slashes, dots, spaces, control characters, non-ASCII, emoji, 512 characters), values of every JSON
kind (nested, non-ASCII, large and negative integers, floats, 64 KiB as UTF-8), some with an expiry
in the future; on every asset of the test DAGs: keys by each kind of writer, one with an expiry;
and keys that are already expired (written with a future expiry, then moved into the past by SQL,
because a write refuses an expiry in the past), which an upgrade must leave behind.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

from airflow.models.asset import AssetModel
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow_shared.state import (
    API_WRITER,
    CLI_WRITER,
    COMMIT_KEY,
    AssetScope,
    StagedCommit,
    StagedOp,
    StagedWrite,
    StateWriter,
    commit_records_scope,
)
from airflow_task_state import get_state_backend, task_scope
from airflow_task_state.codec import encode
from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel
from sqlalchemy import select, update

DAG_IDS = ("upgrade_fill", "upgrade_resumable")

UNUSUAL_KEYS = [
    ".",
    "a/../b",
    "/",
    "trailing/",
    "%2F",
    "dots.in.the.key",
    " spaced  out ",
    "line\nbreak",
    "tab\there",
    "back\\slash",
    "?query#fragment",
    "Grüße/Köln",
    "日本語のキー",
    "\u05e2\u05d1\u05e8\u05d9\u05ea right-to-left",
    "emoji \U0001f680\U0001f9ea",
    "k" * 512,
]

VALUES = {
    "nested": {"a": [1, 2, {"b": None, "c": [True, False]}], "empty": {}, "list": []},
    "text_non_ascii": "Grüße aus Köln — 日本語 — \U0001f680",
    "big_int": 2**70,
    "negative_int": -(2**63),
    "int64_max": 2**63 - 1,
    "float": 3.141592653589793,
    "tiny_float": 1e-300,
    "huge_float": 1.7976931348623157e308,
    "bool": True,
    "zero": 0,
    "empty_string": "",
    "quote_and_escapes": 'say "hi"\n\ttab \\ slash </script>',
}

# Exactly 64 KiB as our compact UTF-8 JSON text (the default [state] max_value_bytes).
LARGE_ASCII = "x" * (65536 - 2)
LARGE_NON_ASCII = "é" * ((65536 - 2) // 2)  # 2 bytes each in UTF-8; 6 characters once escaped


def main(out_path: str) -> None:
    backend = get_state_backend()
    future = datetime.now(UTC) + timedelta(days=10)
    with create_session() as session:
        instances = session.execute(
            select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index)
            .where(TaskInstance.dag_id.in_(DAG_IDS))
            .order_by(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index)
        ).all()
        assets = session.execute(
            select(AssetModel.id, AssetModel.name, AssetModel.uri)
            .where(AssetModel.name.like("upgrade_%"))
            .order_by(AssetModel.id)
        ).all()
    if len(instances) < 5 or len(assets) < 3:
        raise SystemExit(f"the test DAGs did not run: {len(instances)} task instances, {len(assets)} assets")

    scopes = [task_scope(*row) for row in instances]
    for number, scope in enumerate(scopes):
        writer = StateWriter.task_try(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, 1)
        for i, key in enumerate(UNUSUAL_KEYS):
            backend.write(scope, key, encode({"i": i, "key": key}), writer=writer)
        for i in range(40):  # volume: several batches of the command on every database
            backend.write(scope, f"many/{i:04d}", encode({"n": i, "scope": number}))
        for name, value in VALUES.items():
            backend.write(scope, f"value/{name}", encode(value), writer=None)
        # Task keys with an expiry of their own, which 3.3 must keep.
        backend.write(scope, "ttl/ten days", encode({"lives": "10 days"}), expires_at=future)
        if number % 4 == 0:
            backend.write(scope, "value/64KiB ascii", encode(LARGE_ASCII))
            backend.write(scope, "value/64KiB non-ascii", encode(LARGE_NON_ASCII))
        # Written live, then expired below.
        backend.write(scope, "expired/one", encode("gone"), expires_at=future)
        if number % 4 == 1:  # a try's staged writes: the key, and the commit's record in its run
            staged = StagedWrite(scope, "staged/watermark", StagedOp.SET, encode(number))
            backend.apply_commit(StagedCommit(f"commit-{number}", scope, (staged,), writer=writer))
        if number % 4 == 2:  # a commit's record as releases up to 0.7 left it, in the task's scope
            backend.write(scope, COMMIT_KEY, encode(f"commit-{number}"), expires_at=future)

    asset_writers = {
        "by task": StateWriter.task_try("upgrade_fill", "manual_asset_run", "publish", 2, 3),
        "by api": API_WRITER,
        "by cli": CLI_WRITER,
    }
    for asset in assets:
        scope = AssetScope(asset.id)
        for label, writer in asset_writers.items():
            backend.write(
                scope, f"watermark {label}", encode({"asset": asset.name, "by": label}), writer=writer
            )
        for key in [*UNUSUAL_KEYS[:6], "Grüße/Köln", "emoji \U0001f680"]:
            backend.write(scope, key, encode([asset.id, key]), writer=API_WRITER)
        backend.write(scope, "value/nested", encode(VALUES["nested"]), writer=CLI_WRITER)
        backend.write(scope, "ttl/five days", encode(5), writer=API_WRITER, expires_at=future)
        backend.write(scope, "expired/one", encode("gone"), writer=API_WRITER, expires_at=future)

    past = datetime.now(UTC) - timedelta(hours=1)
    with create_session() as session:
        session.execute(
            update(TaskStateModel).where(TaskStateModel.key == "expired/one").values(expires_at=past)
        )
        session.execute(
            update(AssetStateModel).where(AssetStateModel.key == "expired/one").values(expires_at=past)
        )

    dump = {"task": [], "asset": [], "expired": {"task": [], "asset": []}, "commit_records": 0}
    # Our bookkeeping, which an upgrade leaves behind: each run's records, and those of releases up to 0.7.
    for records in {commit_records_scope(scope) for scope in scopes}:
        dump["commit_records"] += len(backend.entries(records).entries)
    for scope in scopes:
        where = {"dag_id": scope.dag_id, "run_id": scope.run_id, "task_id": scope.task_id}
        where["map_index"] = scope.map_index
        for entry in backend.entries(scope).entries:
            if entry.key == COMMIT_KEY:
                dump["commit_records"] += 1
            else:
                dump["task"].append({**where, **_entry(entry)})
        if backend.get(scope, "expired/one") is not None:
            raise SystemExit(f"our backend still reads an expired key of {scope}")
        dump["expired"]["task"].append({**where, "key": "expired/one"})
    for asset in assets:
        scope = AssetScope(asset.id)
        where = {"asset_id": asset.id, "name": asset.name, "uri": asset.uri}
        for entry in backend.entries(scope).entries:
            dump["asset"].append({**where, **_entry(entry)})
        dump["expired"]["asset"].append({**where, "key": "expired/one"})
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(dump, out, ensure_ascii=False)


def _entry(entry) -> dict:
    writer = entry.writer
    return {
        "key": entry.key,
        "value": json.loads(entry.value),
        "updated_at": entry.updated_at.isoformat() if entry.updated_at else None,
        "expires_at": entry.expires_at.isoformat() if entry.expires_at else None,
        "writer": None
        if writer is None
        else {
            "kind": str(writer.kind),
            "dag_id": writer.dag_id,
            "run_id": writer.run_id,
            "task_id": writer.task_id,
            "map_index": writer.map_index,
        },
    }


if __name__ == "__main__":
    main(sys.argv[1])
