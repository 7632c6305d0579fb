"""
Run by Airflow 3.2's interpreter (this repository's venv) on the upgrade test's database, once the
test DAG has a run (run by ``airflow dags test``, or only triggered): adds, through our configured
backend, what server code can write on every task instance of the DAG's run and on every asset of
the DAG, then writes as JSON (to the path given as the only argument) every live key as our backend
reads it back: what the upgrade must carry.

What it adds: keys that paths and collations mangle (slashes, dots, spaces, control characters,
non-ASCII, emoji, keys differing only in case, 512 characters), values of every JSON kind (nested,
non-ASCII, large and negative integers, floats, 64 KiB), versions above 1, keys with an expiry in the
future, and enough keys that the move takes several batches; on assets, a key by each kind of writer
(task, REST API, CLI) and one with an expiry; a commit of staged writes (its record kept in the
run's records). Then keys already expired (written with a future
expiry, then moved into the past by SQL: a write refuses an expiry in the past), which the upgrade
does not carry, and a commit record as releases up to 0.7 kept it (key ``airflow.staged_commit``).
Large values (docs/large-values.md) in the ``file://`` store the test configures: a JSON value and
a file on a task instance, a file on an asset, each a reference whose object the upgrade must leave
readable; the dump's ``large`` says what each must read back as (kind and BLAKE3 of its bytes, of
``json.dumps`` of a JSON value).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import blake3
from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
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
from airflow_task_state import get_state_backend, object_storage, task_scope
from airflow_task_state.codec import encode
from airflow_task_state.metastore.models import AssetStateModel, TaskStateModel
from airflow_task_state.worker import large
from entries import entry_record  # beside this script
from sqlalchemy import select, update

DAG_ID = "upgrade_state"
#: The task instances of the DAG's run (tests/dags/upgrade/upgrade_dags.py), mapped ones included.
TASK_INSTANCES = [("process", 0), ("process", 1), ("process", 2), ("publish", -1), ("run_job", -1)]

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
    "Retry-Count",
    "retry-count",
    "k" * 512,
]

VALUES = {
    "nested": {"a": [1, 2, {"b": None, "c": [True, False]}], "empty": {}, "list": []},
    "text_non_ascii": "Grüße aus Köln — 日本語 — \U0001f680",
    "big_int": 2**70,
    "negative_int": -(2**63),
    "float": 3.141592653589793,
    "huge_float": 1.7976931348623157e308,
    "empty_string": "",
    "quote_and_escapes": 'say "hi"\n\ttab \\ slash </script>',
    "64KiB": "é" * ((65536 - 2) // 2),  # 64 KiB as UTF-8 JSON text: the default [state] max_value_bytes
}

#: Keys per task instance written in batches, so that the move takes more than one batch of 1000.
MANY = 250


def main(out_path: str) -> None:
    backend = get_state_backend()
    future = datetime.now(UTC) + timedelta(days=10)
    with create_session() as session:
        [run_id] = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == DAG_ID)).all()
        assets = session.scalars(
            select(AssetModel.id).where(AssetModel.name.like("upgrade_%")).order_by(AssetModel.id)
        ).all()
    if len(assets) < 2:
        raise SystemExit(f"the test DAG's assets are not in the database: {assets}")

    scopes = [task_scope(DAG_ID, run_id, task_id, map_index) for task_id, map_index in TASK_INSTANCES]
    for number, scope in enumerate(scopes):
        writer = StateWriter.task_try(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, 1)
        # In batches: one transaction each (a write apiece would take a minute on the slower databases).
        backend.set_many(
            scope, {key: encode({"i": i, "key": key}) for i, key in enumerate(UNUSUAL_KEYS)}, writer=writer
        )
        backend.set_many(scope, {f"many/{i:04d}": encode([number, i]) for i in range(MANY)})
        backend.set_many(scope, {f"value/{name}": encode(value) for name, value in VALUES.items()})
        backend.write(scope, "twice", encode("first"), writer=writer)
        backend.write(scope, "twice", encode("second"), writer=writer, expires_at=future)
        backend.write(scope, "expired/one", encode("gone"), expires_at=future)
    staged = StagedWrite(scopes[2], "staged/watermark", StagedOp.SET, encode(2))
    backend.apply_commit(StagedCommit("commit-of-fill", scopes[2], (staged,), writer=None))
    # A commit record as releases up to 0.7 kept it, in the task instance's own scope.
    backend.write(scopes[0], COMMIT_KEY, encode("commit-0.7"), expires_at=future)

    writers = {"by task": StateWriter.task_try(DAG_ID, run_id, "publish", -1, 3)}
    writers |= {"by api": API_WRITER, "by cli": CLI_WRITER}
    for asset_id in assets:
        scope = AssetScope(asset_id)
        for label, writer in writers.items():
            backend.write(
                scope, f"watermark {label}", encode({"asset": asset_id, "by": label}), writer=writer
            )
        keys = UNUSUAL_KEYS[:6] + UNUSUAL_KEYS[-4:]
        backend.set_many(scope, {key: encode([asset_id, key]) for key in keys}, writer=API_WRITER)
        backend.write(scope, "ttl/five days", encode(5), writer=CLI_WRITER, expires_at=future)
        backend.write(scope, "expired/one", encode("gone"), writer=API_WRITER, expires_at=future)

    large_written = _write_large_values(backend, scopes[0], AssetScope(assets[0]))

    past = datetime.now(UTC) - timedelta(hours=1)
    with create_session() as session:
        for model in (TaskStateModel, AssetStateModel):
            session.execute(update(model).where(model.key == "expired/one").values(expires_at=past))

    records = commit_records_scope(scopes[0])
    task_keys = [
        {
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "task_id": scope.task_id,
            "map_index": scope.map_index,
        }
        | entry_record(entry)
        for scope in [*scopes, records]
        for entry in backend.entries(scope).entries
    ]
    asset_keys = [
        {"asset_id": asset_id} | entry_record(entry)
        for asset_id in assets
        for entry in backend.entries(AssetScope(asset_id)).entries
    ]
    if any(item["key"] == "expired/one" for item in task_keys + asset_keys):
        raise SystemExit("our backend still reads an expired key")
    dump = {"task": task_keys, "asset": asset_keys, "run_id": run_id, "assets": list(assets)}
    dump["large"] = large_written
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(dump, out, ensure_ascii=False)


def _write_large_values(backend, task: object, asset: AssetScope) -> dict[str, dict[str, str]]:
    """
    As a task's ``set`` (a value past max_value_bytes) and ``set_file`` write them: the object
    first, then its reference; by key, what each reads back as.
    """
    document = {"rows": [[i, f"row {i}"] for i in range(20_000)]}  # about 300 KB of JSON
    checkpoint = bytes(range(256)) * 4096 * 3  # 3 MiB
    written = {
        "large/results": (task, large.encode(document, "fill"), json.dumps(document).encode()),
        "large/checkpoint": (task, large.store_file(checkpoint), checkpoint),
        "large/asset file": (asset, large.store_file(checkpoint[: 1 << 20]), checkpoint[: 1 << 20]),
    }
    assert object_storage.configured(), "the upgrade test configures [state] object_storage_path"
    read_back = {}
    for key, (scope, reference_text, content) in written.items():
        assert reference_text.startswith('{"$airflow_task_state.large_value"'), reference_text[:80]
        backend.write(scope, key, reference_text)
        kind = "json" if key == "large/results" else "bytes"
        read_back[key] = {"kind": kind, "blake3": blake3.blake3(content).hexdigest()}
    return read_back


if __name__ == "__main__":
    main(sys.argv[1])
