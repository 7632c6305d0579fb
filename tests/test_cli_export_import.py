"""
`airflow state export` and `import`, through Airflow's real CLI parser in this process: every key
and value survives metastore → Redis → metastore exactly, with the try that wrote it; rows whose
dag run, task instance or asset does not exist are refused with their line numbers and nothing is
written.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from airflow._shared.timezones.timezone import utcnow
from airflow.models.asset import AssetModel
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunType
from airflow_shared.state import CLI_WRITER, AssetScope, BaseStateBackend, StateScope, StateWriter, TaskScope
from airflow_shared.state._memory import MemoryStateBackend
from airflow_task_state import codec, task_scope
from airflow_task_state.cli import export_command
from airflow_task_state.configured_backend import get_state_backend, reset_state_backend
from airflow_task_state.metastore import MetastoreStateBackend
from sqlalchemy import delete, insert, update

REDIS = "airflow_state_redis.RedisStateBackend"

#: Keys and values that must come back exactly: any text a key may be, JSON of every kind.
CORPUS = {
    "plain": "app_001",
    "a/b/c": {"path": "s3://bucket/a/b"},
    "dots.in.key": 0.1,
    "with spaces": [1, "two", None, {"three": True}],
    "ünïcödé ✓ 東京": "Zürich → 東京 🚀",
    "line\nbreak": 'tab\there, line\u2028separator, quote " and backslash \\',
    "big_int": 2**62,
    "negative": -1.5e-7,
    "false": False,
    "empty_dict": {},
    "empty_string": "",
    "numeric_string": "3",
    "x" * 512: "the longest key",
    # 64 KiB: the largest value [state] max_value_bytes allows by default, as JSON text.
    "large": "x" * (65536 - 2),
}


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def backend_named(monkeypatch, redis_url) -> Iterator[Callable[[str], None]]:
    """``backend_named("redis" | "metastore")``: what [state] backend says from now on, in this process."""

    def use(kind: str) -> None:
        if kind == "redis":
            monkeypatch.setenv("AIRFLOW__STATE__BACKEND", REDIS)
            monkeypatch.setenv("AIRFLOW__STATE_REDIS__URL", redis_url)
        else:
            monkeypatch.delenv("AIRFLOW__STATE__BACKEND", raising=False)
        reset_state_backend()

    use("metastore")
    yield use
    reset_state_backend()


@dataclass
class Deployment:
    """The dag runs, task instances and assets of one test, and their scopes."""

    dag_id: str
    asset_name: str
    asset_uri: str
    scopes: dict[str, StateScope]

    def asset_id(self) -> int:
        return self.scopes["asset"].asset_id  # type: ignore[union-attr]


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    """
    Two runs of a DAG (one with an unmapped task and a task mapped over 0..1) and an asset, as real
    rows. Removed afterwards, with their state on every backend this test touched.
    """

    unique = uuid.uuid4().hex[:10]
    dag_id = f"transfer_{unique}"
    task_instances = {"run1": [("extract", -1), ("mapped", 0), ("mapped", 1)], "run2": [("extract", -1)]}
    with create_session() as session:
        for run_id, tis in task_instances.items():
            session.add(
                DagRun(dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.SUCCESS)
            )
            session.flush()
            for task_id, map_index in tis:
                session.execute(
                    insert(TaskInstance).values(
                        dag_id=dag_id,
                        run_id=run_id,
                        task_id=task_id,
                        map_index=map_index,
                        pool="default_pool",
                    )
                )
        asset = AssetModel(name=f"transfer_{unique}", uri=f"s3://transfer/{unique}", group="asset")
        session.add(asset)
        session.flush()
        asset_id = asset.id
    scopes: dict[str, StateScope] = {
        f"{run_id}/{task_id}/{map_index}": task_scope(dag_id, run_id, task_id, map_index)
        for run_id, tis in task_instances.items()
        for task_id, map_index in tis
    }
    scopes["asset"] = AssetScope(asset_id)
    made = Deployment(dag_id, f"transfer_{unique}", f"s3://transfer/{unique}", scopes)
    yield made
    for scope in made.scopes.values():
        get_state_backend().clear(scope)
    with create_session() as session:
        session.execute(delete(TaskInstance).where(TaskInstance.dag_id == dag_id))
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id))
        session.execute(delete(AssetModel).where(AssetModel.id == made.asset_id()))


def seed(deployment: Deployment) -> dict[tuple[StateScope, str], tuple[str, int | None]]:
    """The corpus in every scope of *deployment* on the configured backend: (scope, key) → (text, try)."""
    backend = get_state_backend()
    stored = {}
    for number, scope in enumerate(deployment.scopes.values(), start=1):
        for key, value in CORPUS.items():
            text = codec.encode(value)
            try_number = number if isinstance(scope, TaskScope) else None
            backend.set_by_try(scope, key, text, try_number=try_number)
            stored[(scope, key)] = (text, try_number)
    return stored


def stored_now(deployment: Deployment) -> dict[tuple[StateScope, str], tuple[str, int | None]]:
    """What the configured backend holds in the scopes of *deployment*: (scope, key) → (text, try)."""
    backend = get_state_backend()
    found = {}
    for scope in deployment.scopes.values():
        for entry in backend.entries(scope).entries:
            found[(scope, entry.key)] = (entry.value, entry.updated_by_try)
    return found


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def without_updated_at(rows: list[dict]) -> list[dict]:
    return [{field: value for field, value in row.items() if field != "updated_at"} for row in rows]


def export_all(cli, deployment: Deployment, path: Path) -> list[dict]:
    """Export the test's dag and asset (and nothing else of the shared database) to *path*."""
    cli("export", "--dag-id", deployment.dag_id, "--asset-name", deployment.asset_name, "--file", str(path))
    return rows_of(path)


# --- round trips ----------------------------------------------------------------------------------


def test_metastore_to_redis_and_back_keeps_every_key_value_and_try(
    cli, deployment, backend_named, tmp_path, monkeypatch
):
    # Small pages, so that paging through runs and through each scope's keys is what is tested.
    monkeypatch.setattr(export_command, "RUN_PAGE", 1)
    monkeypatch.setattr(export_command, "ENTRY_PAGE", 3)
    original = seed(deployment)
    assert len(original) == len(CORPUS) * 5

    exported = export_all(cli, deployment, tmp_path / "from_metastore.jsonl")
    assert len(exported) == len(original)
    by_scope_key = {
        (row["scope"], row.get("run_id"), row.get("task_id"), row.get("map_index"), row["key"]): row
        for row in exported
    }
    row = by_scope_key[("task", "run1", "mapped", 1, "ünïcödé ✓ 東京")]
    assert row["value"] == CORPUS["ünïcödé ✓ 東京"] and row["dag_id"] == deployment.dag_id
    assert row["updated_by_try"] == 3 and row["updated_at"]
    asset_row = by_scope_key[("asset", None, None, None, "large")]
    assert asset_row["asset_name"] == deployment.asset_name and asset_row["asset_uri"] == deployment.asset_uri
    assert "updated_by_try" not in asset_row and len(codec.encode(asset_row["value"]).encode()) == 65536

    backend_named("redis")
    assert stored_now(deployment) == {}
    report = cli("import", str(tmp_path / "from_metastore.jsonl"))
    assert report.strip() == f"Imported {len(original)} keys ({len(original)} new, 0 overwritten)"
    assert stored_now(deployment) == original  # the stored text itself, and the try that wrote it
    from_redis = export_all(cli, deployment, tmp_path / "from_redis.jsonl")
    assert without_updated_at(from_redis) == without_updated_at(exported)

    backend_named("metastore")
    for scope in deployment.scopes.values():
        get_state_backend().clear(scope)
    cli("import", str(tmp_path / "from_redis.jsonl"))
    assert stored_now(deployment) == original
    back = export_all(cli, deployment, tmp_path / "back.jsonl")
    assert without_updated_at(back) == without_updated_at(exported)


def test_assets_are_found_by_name_and_uri_not_by_id(cli, deployment, backend_named, tmp_path):
    """Ids differ between deployments: an asset created again (a new id) gets its state back."""

    get_state_backend().set(deployment.scopes["asset"], "watermark", '"2026-01-01"')
    path = tmp_path / "asset.jsonl"
    cli("export", "--asset-uri", deployment.asset_uri, "--file", str(path))
    old_id = deployment.asset_id()
    with create_session() as session:
        # Renamed out of the way first and deleted only after the new row exists: SQLite gives a
        # deleted highest row's id to the next insert, and the test needs a new id.
        session.execute(
            update(AssetModel)
            .where(AssetModel.id == old_id)
            .values(name=f"old_{old_id}", uri=f"s3://old/{old_id}")
        )
        asset = AssetModel(name=deployment.asset_name, uri=deployment.asset_uri, group="asset")
        session.add(asset)
        session.flush()
        new_id = asset.id
        session.execute(delete(AssetModel).where(AssetModel.id == old_id))
    assert new_id != old_id
    deployment.scopes["asset"] = AssetScope(new_id)  # so that the fixture removes it
    cli("import", str(path))
    assert get_state_backend().get(AssetScope(new_id), "watermark") == '"2026-01-01"'


def test_export_to_stdout_is_only_json_lines(airflow_parser, capsys, deployment):
    get_state_backend().set(deployment.scopes["run2/extract/-1"], "k", "1")
    args = airflow_parser.parse_args(["state", "export", "--dag-id", deployment.dag_id])
    capsys.readouterr()
    args.func(args)
    shown = capsys.readouterr()
    [row] = [json.loads(line) for line in shown.out.splitlines()]
    assert row == {
        "scope": "task",
        "dag_id": deployment.dag_id,
        "run_id": "run2",
        "task_id": "extract",
        "map_index": -1,
        "key": "k",
        "value": 1,
        "updated_at": row["updated_at"],
        "updated_by_try": None,
        "expires_at": None,
    }
    assert shown.err.strip() == "Exported 1 key of 1 task instance and 0 keys of 0 assets"


def test_export_filters(cli, deployment, tmp_path, refused):
    backend = get_state_backend()
    backend.set(deployment.scopes["run1/extract/-1"], "in_run1", "1")
    backend.set(deployment.scopes["run2/extract/-1"], "in_run2", "2")
    backend.set(deployment.scopes["asset"], "in_asset", "3")
    path = tmp_path / "out.jsonl"

    def exported(*options: str) -> set[str]:
        cli("export", *options, "--file", str(path))
        return {row["key"] for row in rows_of(path)}

    dag, asset = ["--dag-id", deployment.dag_id], ["--asset-name", deployment.asset_name]
    assert exported(*dag) == {"in_run1", "in_run2"}  # a task filter alone: no asset state
    assert exported(*dag, "--run-id", "run2") == {"in_run2"}
    assert exported(*asset) == {"in_asset"}  # an asset filter alone: no task state
    assert exported("--asset-uri", deployment.asset_uri) == {"in_asset"}
    assert exported(*dag, *asset) == {"in_run1", "in_run2", "in_asset"}
    everything = exported()
    assert {"in_run1", "in_run2", "in_asset"} <= everything
    assert "in_asset" not in exported("--tasks-only") and "in_run1" in exported("--tasks-only")
    assert "in_run1" not in exported("--assets-only") and "in_asset" in exported("--assets-only")

    assert (
        refused("export", "--tasks-only", "--assets-only") == "give --tasks-only or --assets-only, not both"
    )
    assert refused("export", "--tasks-only", *asset) == (
        "--tasks-only exports no asset state; leave out --asset-name"
    )
    assert (
        refused("export", "--assets-only", *dag) == "--assets-only exports no task state; leave out --dag-id"
    )
    assert refused("export", "--asset-name", "no_such_asset_anywhere") == (
        "no asset with name='no_such_asset_anywhere'"
    )
    assert refused("export", "--file", str(tmp_path / "no" / "such" / "dir.jsonl")).startswith(
        "cannot write "
    )


# --- import: checks before any write ----------------------------------------------------------------


def task_line(deployment: Deployment, key: str, value, **fields) -> str:
    row = {
        "scope": "task",
        "dag_id": deployment.dag_id,
        "run_id": "run1",
        "task_id": "extract",
        "map_index": -1,
        "key": key,
        "value": value,
        "updated_at": None,
        "updated_by_try": 1,
        **fields,
    }
    return json.dumps(row, ensure_ascii=False)


def asset_line(deployment: Deployment, key: str, value, **fields) -> str:
    row = {"scope": "asset", "asset_name": deployment.asset_name, "asset_uri": deployment.asset_uri}
    return json.dumps({**row, "key": key, "value": value, **fields}, ensure_ascii=False)


def test_rows_for_what_does_not_exist_are_refused_with_line_numbers_and_nothing_is_written(
    refused, deployment, tmp_path
):
    lines = [
        task_line(deployment, "good", 1),
        task_line(deployment, "k", 1, run_id="no_such_run"),
        task_line(deployment, "k", 1, task_id="no_such_task"),
        task_line(deployment, "k", 1, task_id="mapped", map_index=5),
        asset_line(deployment, "k", 1, asset_uri="s3://no/such/asset"),
        asset_line(deployment, "good", 2),
        "",  # blank lines are skipped, and still counted as lines
        "{not json",
        '["a", "list"]',
        task_line(deployment, "", 1),
        task_line(deployment, "null", None),
        task_line(deployment, "k", 1, extra="field"),
        task_line(deployment, "good", 2),  # the same key as line 1
        json.dumps({"scope": "dag", "key": "k", "value": 1}),
        asset_line(deployment, "k", 1, updated_by_try=2),
        task_line(deployment, "k", 1, updated_by_try=-1),
        task_line(deployment, "k", 1, map_index=2**31),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    message = refused("import", str(path), "-y")
    listed = message.stderr
    assert message == "refused 14 of 16 rows; nothing was imported"
    run = f"dag_id={deployment.dag_id!r}"
    assert listed.splitlines() == [
        f"line 2: no dag run with {run} and run_id='no_such_run'",
        f"line 3: dag run {deployment.dag_id!r}/'run1' has no task instance 'no_such_task'",
        f"line 4: dag run {deployment.dag_id!r}/'run1' has no task instance 'mapped' with map_index=5",
        f"line 5: no asset with name={deployment.asset_name!r} and uri='s3://no/such/asset'",
        "line 8: not JSON: Expecting property name enclosed in double quotes at column 2",
        "line 9: a row must be a JSON object, not list",
        "line 10: invalid key: state key must not be empty",
        "line 11: invalid value: state values cannot be None; to remove a key call delete()",
        "line 12: unknown field for task state: extra",
        f"line 13: key 'good' of task instance (dag_id={deployment.dag_id!r}, run_id='run1', "
        "task_id='extract') is also on line 1",
        'line 14: "scope" must be "task" or "asset", not \'dag\'',
        'line 15: asset state records no try: "updated_by_try" must be null or left out',
        'line 16: "updated_by_try" must be a try number (0 to 2147483647) or null, got -1',
        'line 17: "map_index" must be -1 (not mapped) or an index from 0 to 2147483647, got 2147483648',
    ]
    assert stored_now(deployment) == {}


def test_an_oversize_value_and_a_file_that_is_not_utf8_are_refused(
    refused, deployment, tmp_path, monkeypatch
):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "10")
    path = tmp_path / "rows.jsonl"
    path.write_bytes(
        (
            task_line(deployment, "fits", "12345678")
            + "\n"
            + task_line(deployment, "big", "123456789")
            + "\n"
        ).encode()
        + b'{"scope": "task", "key": "\xff"}\n'
    )
    message = refused("import", str(path))
    listed = message.stderr
    assert message == "refused 2 of 3 rows; nothing was imported"
    assert listed.splitlines() == [
        "line 2: invalid value: state value is 11 bytes as JSON; the limit is 10 ([state] max_value_bytes)",
        "line 3: not UTF-8 text",
    ]
    assert refused("import", str(tmp_path / "missing.jsonl")) == (
        f"cannot read {tmp_path / 'missing.jsonl'}: No such file or directory"
    )
    assert stored_now(deployment) == {}


def test_dry_run_says_what_it_would_do_and_writes_nothing(cli, deployment, tmp_path):
    get_state_backend().set(deployment.scopes["run1/extract/-1"], "exists", "0")
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "\n".join(
            [
                task_line(deployment, "exists", 1),
                task_line(deployment, "new", 2),
                asset_line(deployment, "a", 3),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    before = stored_now(deployment)
    shown = cli("import", str(path), "--dry-run").splitlines()
    assert shown[0].startswith("line 1: would overwrite key 'exists' of task instance (")
    assert shown[1].startswith("line 2: would write key 'new' of task instance (")
    assert (
        shown[2]
        == f"line 3: would write key 'a' of asset {deployment.asset_name!r} (uri={deployment.asset_uri!r})"
    )
    assert shown[3] == "Dry run: would import 3 keys (1 overwritten), skip 0; nothing was written"
    shown = cli("import", str(path), "--dry-run", "-a", "skip").splitlines()
    assert shown[0].startswith("line 1: would skip key 'exists'")
    assert shown[-1] == "Dry run: would import 2 keys (0 overwritten), skip 1; nothing was written"
    assert stored_now(deployment) == before


def test_existing_keys_overwrite_after_asking_or_skip_or_fail(cli, refused, answer, deployment, tmp_path):
    scope = deployment.scopes["run1/extract/-1"]
    backend = get_state_backend()
    backend.set(scope, "exists", '"old"')
    path = tmp_path / "rows.jsonl"
    path.write_text(
        task_line(deployment, "exists", "new", updated_by_try=4)
        + "\n"
        + task_line(deployment, "fresh", 1)
        + "\n",
        encoding="utf-8",
    )

    message = refused("import", str(path), "-a", "fail")
    listed = message.stderr
    assert message == "refused 1 of 2 rows; nothing was imported"
    assert listed.strip().endswith("task_id='extract') already exists (-a fail)")
    assert backend.get(scope, "fresh") is None

    answer("n\n")
    cancelled = refused("import", str(path))
    question = "Importing 2 keys: 1 key already exists and will be overwritten. Proceed? [y/n]"
    assert question in cancelled.stdout
    assert cancelled == "Cancelled, nothing was imported."
    assert (backend.get(scope, "exists"), backend.get(scope, "fresh")) == ('"old"', None)

    assert cli("import", str(path), "-a", "skip").strip() == (
        "Imported 1 key (1 new, 0 overwritten), skipped 1 that already exist"
    )
    assert (backend.get(scope, "exists"), backend.get(scope, "fresh")) == ('"old"', "1")

    answer("y\n")
    assert "Imported 2 keys (0 new, 2 overwritten)" in cli("import", str(path))
    assert backend.get(scope, "exists") == '"new"'
    [entry] = backend.entries(scope, key_prefix="exists").entries
    assert entry.updated_by_try == 4


def test_import_from_stdin(cli, refused, deployment, monkeypatch):
    scope = deployment.scopes["run1/mapped/1"]
    line = task_line(deployment, "from_stdin", {"ok": True}, task_id="mapped", map_index=1) + "\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(line.encode())))
    assert cli("import", "-").strip() == "Imported 1 key (1 new, 0 overwritten)"
    assert get_state_backend().get(scope, "from_stdin") == '{"ok":true}'
    # Overwriting asks, and stdin is taken by the rows: -y, or another -a, is needed.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(line.encode())))
    assert refused("import", "-") == (
        "1 key already exists; the rows come from stdin, so there is no one to ask: "
        "pass -y to overwrite them, or -a skip or -a fail"
    )
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(line.encode())))
    assert cli("import", "-", "-y").strip() == "Imported 1 key (0 new, 1 overwritten)"


def test_a_write_that_fails_on_the_metastore_leaves_nothing_written(
    refused, deployment, tmp_path, monkeypatch
):
    """The checks passed, then the second write fails: the metastore's writes are one transaction."""

    real_write = MetastoreStateBackend.write
    calls = []

    def fail_the_second(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("the database went away\nwith a second line")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(MetastoreStateBackend, "write", fail_the_second)
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "\n".join(task_line(deployment, key, 1) for key in ("first", "second", "third")) + "\n",
        encoding="utf-8",
    )
    message = refused("import", str(path))
    assert message == "line 2: writing failed: RuntimeError: the database went away; nothing was imported"
    assert stored_now(deployment) == {}


# --- expiry and writers -----------------------------------------------------------------


def entries_by_key(scope: StateScope) -> dict:
    return {entry.key: entry for entry in get_state_backend().entries(scope).entries}


def test_export_import_keeps_expiry_and_writer_from_backend_to_backend(
    cli, deployment, backend_named, tmp_path
):
    backend = get_state_backend()
    task, asset = deployment.scopes["run1/mapped/1"], deployment.scopes["asset"]
    in_a_day = utcnow() + timedelta(days=1, microseconds=123)
    in_a_week = utcnow() + timedelta(weeks=1)
    loader = StateWriter.task_try(deployment.dag_id, "run2", "extract", -1, 4)
    a_try = StateWriter.task_try(deployment.dag_id, "run1", "mapped", 1, 2)
    backend.write(task, "expiring", "1", writer=a_try, expires_at=in_a_day)
    backend.write(task, "forever", "2")
    backend.write(asset, "watermark", '"2026-01-01"', writer=loader)
    backend.write(asset, "watermark", '"2026-01-02"', writer=loader, expires_at=in_a_week)  # version 2
    backend.write(asset, "by_cli", "3", writer=CLI_WRITER)

    exported = export_all(cli, deployment, tmp_path / "from_metastore.jsonl")
    rows = {row["key"]: row for row in exported}
    assert rows["expiring"]["expires_at"] == in_a_day.isoformat() and rows["expiring"]["updated_by_try"] == 2
    assert rows["forever"]["expires_at"] is None
    assert rows["watermark"]["updated_by"] == {
        "kind": "task",
        "dag_id": deployment.dag_id,
        "run_id": "run2",
        "task_id": "extract",
        "map_index": -1,
        "try_number": 4,
    }
    assert rows["by_cli"]["updated_by"] == {"kind": "cli"}
    assert "version" not in rows["watermark"]  # versions are the target's

    def assert_restored() -> None:
        task_entries, asset_entries = entries_by_key(task), entries_by_key(asset)
        assert task_entries["expiring"].expires_at == in_a_day
        assert task_entries["expiring"].updated_by_try == 2
        assert task_entries["forever"].expires_at is None
        assert asset_entries["watermark"].expires_at == in_a_week
        assert asset_entries["watermark"].writer == loader
        assert asset_entries["by_cli"].writer == CLI_WRITER
        assert asset_entries["watermark"].version == 1  # a key the import creates starts at 1

    backend_named("redis")
    # Redis is not told when an asset is deleted, and SQLite gives a new asset the id of one an
    # earlier test deleted: start from empty scopes.
    for scope in (task, asset):
        get_state_backend().clear(scope)
    report = cli("import", str(tmp_path / "from_metastore.jsonl")).strip()
    assert report == "Imported 4 keys (4 new, 0 overwritten)"
    assert_restored()
    from_redis = export_all(cli, deployment, tmp_path / "from_redis.jsonl")
    assert without_updated_at(from_redis) == without_updated_at(exported)

    backend_named("metastore")
    for scope in (task, asset):
        get_state_backend().clear(scope)
    cli("import", str(tmp_path / "from_redis.jsonl"))
    assert_restored()


def test_a_row_expired_by_the_time_of_the_import_is_skipped_and_counted(cli, deployment, tmp_path):
    past, future = utcnow() - timedelta(seconds=1), utcnow() + timedelta(hours=1)
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "\n".join(
            [
                task_line(deployment, "gone", 1, expires_at=past.isoformat()),
                task_line(deployment, "kept", 2, expires_at=future.isoformat()),
                asset_line(deployment, "gone_too", 3, expires_at=past.isoformat()),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    shown = cli("import", str(path), "--dry-run").splitlines()
    assert shown[0].startswith("line 1: would skip key 'gone' of task instance (")
    assert shown[0].endswith(f"(expired at {past.isoformat()})")
    assert shown[-1] == "Dry run: would import 1 key (0 overwritten), skip 2 (2 expired); nothing was written"
    report = cli("import", str(path)).strip()
    assert report == "Imported 1 key (1 new, 0 overwritten), skipped 2 already expired"
    assert {key for _, key in stored_now(deployment)} == {"kept"}
    assert entries_by_key(deployment.scopes["run1/extract/-1"])["kept"].expires_at == future


def test_a_file_exported_before_expiry_existed_still_imports(cli, deployment, tmp_path):
    """Rows of the first export format (no expires_at, no updated_by) never expire and have no writer."""
    path = tmp_path / "old.jsonl"
    old_task_row = {
        "scope": "task",
        "dag_id": deployment.dag_id,
        "run_id": "run1",
        "task_id": "extract",
        "map_index": -1,
        "key": "job",
        "value": {"id": "app_001"},
        "updated_at": "2026-01-02T03:04:05.123456+00:00",
        "updated_by_try": 2,
    }
    old_asset_row = {
        "scope": "asset",
        "asset_name": deployment.asset_name,
        "asset_uri": deployment.asset_uri,
        "key": "watermark",
        "value": "2026-01-01",
        "updated_at": "2026-01-02T03:04:05.123456+00:00",
    }
    path.write_text(f"{json.dumps(old_task_row)}\n{json.dumps(old_asset_row)}\n", encoding="utf-8")
    assert cli("import", str(path)).strip() == "Imported 2 keys (2 new, 0 overwritten)"
    job = entries_by_key(deployment.scopes["run1/extract/-1"])["job"]
    assert (codec.decode(job.value), job.updated_by_try, job.expires_at) == ({"id": "app_001"}, 2, None)
    watermark = entries_by_key(deployment.scopes["asset"])["watermark"]
    assert (watermark.value, watermark.expires_at, watermark.writer) == ('"2026-01-01"', None, None)


def test_bad_expiry_and_writer_fields_are_refused_with_line_numbers(refused, deployment, tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        task_line(deployment, "a", 1, expires_at="tomorrow"),
        task_line(deployment, "b", 1, expires_at="2999-01-01T00:00:00"),
        asset_line(deployment, "c", 1, updated_by={"kind": "robot"}),
        asset_line(deployment, "d", 1, updated_by={"kind": "task", "dag_id": "d"}),
        task_line(deployment, "e", 1, updated_by={"kind": "cli"}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    message = refused("import", str(path))
    assert message == "refused 5 of 5 rows; nothing was imported"
    assert message.stderr.splitlines() == [
        "line 1: \"expires_at\" must be an ISO 8601 timestamp or null (never), not 'tomorrow'",
        'line 2: "expires_at" must name its UTC offset (e.g. 2999-01-01T00:00:00+00:00), '
        "not '2999-01-01T00:00:00'",
        'line 3: "updated_by": "kind" must be one of task, api, cli, not \'robot\'',
        'line 4: "updated_by": run_id of a task writer must be a non-empty string, not None',
        "line 5: unknown field for task state: updated_by",
    ]
    assert stored_now(deployment) == {}


class WithoutExpiry(MemoryStateBackend):
    """A backend that keeps no expiry: the contract's default write() refuses expires_at."""

    supports_expiry = False
    write = BaseStateBackend.write


def test_rows_that_expire_are_refused_on_a_backend_without_expiry(refused, deployment, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.WithoutExpiry")
    reset_state_backend()
    try:
        path = tmp_path / "rows.jsonl"
        lines = [
            task_line(deployment, "forever", 1),
            task_line(deployment, "k", 1, expires_at="2999-01-01T00:00:00+00:00"),
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        message = refused("import", str(path))
        assert message == "refused 1 of 2 rows; nothing was imported"
        assert message.stderr.strip() == (
            "line 2: key 'k' expires at 2999-01-01T00:00:00+00:00, and WithoutExpiry does not support "
            'expiry: import into a backend that does, or set "expires_at" to null (never) in the file'
        )
        assert stored_now(deployment) == {}
    finally:
        reset_state_backend()


def test_a_large_value_exports_as_its_reference_and_imports_with_a_copy_of_its_object(
    cli, refused, deployment, tmp_path, monkeypatch
):
    """The export keeps the reference (small); the import writes a fresh copy's, safe from clean."""
    from airflow_task_state import large_values
    from airflow_task_state import object_storage as objects

    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{tmp_path}")
    scope = deployment.scopes["run1/extract/-1"]
    data = b"checkpoint " * 10_000
    original = objects.write([data], "bytes")
    get_state_backend().set(scope, "ckpt", codec.encode(original.as_value()))
    path = tmp_path / "rows.jsonl"
    [row] = [row for row in export_all(cli, deployment, path) if row["key"] == "ckpt"]
    assert row["value"] == original.as_value()
    get_state_backend().delete(scope, "ckpt")
    cli("import", str(path))
    imported = large_values.parse(json.loads(get_state_backend().get(scope, "ckpt")))
    assert imported.path != original.path and imported.digest == original.digest
    assert b"".join(objects.read(imported)) == data
    # The exported reference's object is gone (collected): nothing is written.
    objects.remove(original.path)
    message = refused("import", str(path), "-a", "overwrite", "-y")
    assert (
        "LargeValueCorruptedError" in message
        and "is missing" in message
        and "nothing was imported" in message
    )
    assert get_state_backend().get(scope, "ckpt") == codec.encode(imported.as_value())
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", "")
    message = refused("import", str(path), "-a", "overwrite", "-y")
    assert message == "refused 1 of 1 row; nothing was imported"
    assert "importing it copies its object, which needs [state] object_storage_path" in message.stderr


def test_clean_on_redis_keeps_objects_only_redis_references_and_collects_the_rest(
    cli, backend_named, deployment, tmp_path, monkeypatch
):
    """
    `airflow state clean` reads references through the configured backend (entries of every task
    instance and asset), so on Redis it keeps what Redis names, in task and asset state, and
    removes objects no key names once past the grace period.
    """
    import os
    import time

    from airflow_task_state import object_storage as objects

    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{tmp_path}")
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "2h")
    backend_named("redis")
    backend = get_state_backend()
    kept = {name: objects.write([name.encode() * 1000], "bytes") for name in ("task", "mapped", "asset")}
    backend.set(deployment.scopes["run1/extract/-1"], "ckpt", codec.encode(kept["task"].as_value()))
    backend.set(deployment.scopes["run1/mapped/1"], "ckpt", codec.encode(kept["mapped"].as_value()))
    backend.set(deployment.scopes["asset"], "ckpt", codec.encode(kept["asset"].as_value()))
    orphan = objects.write([b"left by a killed writer"], "bytes")
    young = objects.write([b"in flight"], "bytes")
    day_ago = time.time() - 86_400  # every object past the grace period but the one in flight
    for reference in (*kept.values(), orphan):
        os.utime(reference.path.removeprefix("file://"), (day_ago, day_ago))
    # The metastore holds nothing of this: only Redis names the kept objects.
    assert MetastoreStateBackend().get(deployment.scopes["asset"], "ckpt") is None
    out = cli("clean", "-y")
    assert "Removed 1 object (" in out and "kept 3 referenced and 1 younger" in out, out
    left = {path.name for path in tmp_path.iterdir()}
    assert left >= {reference.name for reference in (*kept.values(), young)}
    assert orphan.name not in left
    for reference in kept.values():
        assert b"".join(objects.read(reference))[:5] in (b"taskt", b"mappe", b"asset")
