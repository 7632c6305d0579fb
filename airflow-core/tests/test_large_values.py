"""
Large values in object storage (docs/large-values.md), below the task: the reference format, the
objects written and read back checked, a writer SIGKILLed mid-upload, the commit window every
write path enforces, and ``airflow state clean`` collecting what no key references while writers
race it. On ``file://`` here; tests/test_large_values_s3.py runs the storage on a real S3 API.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import blake3
import pytest
from airflow_shared.state import AssetScope, TaskScope
from airflow_task_state import LargeValueCorruptedError, LargeValueError, codec, config, large_values, manage
from airflow_task_state import object_storage as storage
from airflow_task_state.cli.object_collector import collect, referenced_paths
from airflow_task_state.worker import large

# The object store's own tests run in the SQLite pass only (any_database); those of clean and the
# commit window read and write the metadata database, and run on every database.


def _written(data: bytes, kind: str = "bytes") -> large_values.Reference:
    return storage.write([data[i : i + 1000] for i in range(0, len(data), 1000)], kind)


def _age(path: str, by: timedelta) -> None:
    """Make the object at *path* look last modified *by* ago (as a long-finished upload is)."""
    local = path.removeprefix("file://")
    moment = time.time() - by.total_seconds()
    os.utime(local, (moment, moment))


# --- the reference and the object ---------------------------------------------------------------


@pytest.mark.any_database
def test_an_object_reads_back_as_written_and_its_reference_says_where_and_what(store):
    data = os.urandom(10_000)
    reference = _written(data)
    assert reference.algorithm == "blake3" and reference.digest == blake3.blake3(data).hexdigest()
    assert reference.size == len(data)
    assert reference.path == f"file://{store}/{reference.name}" and len(reference.name) == 32
    assert b"".join(storage.read(reference)) == data
    again = large_values.parse(json.loads(codec.encode(reference.as_value())))
    assert again == reference


@pytest.mark.any_database
def test_every_write_gets_its_own_object(store):
    references = {_written(b"same bytes").path for _ in range(20)}
    assert len(references) == 20 and len(list(store.iterdir())) == 20


@pytest.mark.any_database
@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda data: data[:-1], "holds 9999 bytes, 10000 were written"),
        (lambda data: data + b"!", "holds more than the 10000 bytes"),
        (lambda data: bytes([data[0] ^ 0xFF]) + data[1:], "its blake3 is"),  # b"X" + ... was data 1 in 256
    ],
)
def test_a_changed_object_is_an_error_never_a_value(store, damage, words):
    data = os.urandom(10_000)
    reference = _written(data)
    local = Path(reference.path.removeprefix("file://"))
    local.write_bytes(damage(data))
    with pytest.raises(LargeValueCorruptedError, match=words):
        b"".join(storage.read(reference))


def _as_written_with_sha256(data: bytes) -> large_values.Reference:
    """A reference as the first large-value code wrote it: the object's sha256, no blake3."""
    written = _written(data)
    value = written.as_value()
    fields = value[large_values.MARKER]
    del fields["blake3"]
    fields["sha256"] = hashlib.sha256(data).hexdigest()
    return large_values.parse(json.loads(codec.encode(value)))


@pytest.mark.any_database
def test_a_reference_carrying_a_sha256_reads_and_is_checked_as_before(store, tmp_path):
    data = os.urandom(3 * storage.CHUNK_BYTES // 2)
    reference = _as_written_with_sha256(data)
    assert reference.algorithm == "sha256" and '"sha256":' in codec.encode(reference.as_value())
    assert b"".join(storage.read(reference)) == data
    storage.read_into(reference, tmp_path / "restored.bin")
    assert (tmp_path / "restored.bin").read_bytes() == data
    Path(reference.path.removeprefix("file://")).write_bytes(b"X" + data[1:])
    with pytest.raises(LargeValueCorruptedError, match="its sha256 is"):
        b"".join(storage.read(reference))
    with pytest.raises(LargeValueCorruptedError, match="its sha256 is"):
        storage.read_into(reference, tmp_path / "again.bin")


@pytest.mark.any_database
def test_a_failed_read_into_a_path_leaves_the_path_as_it_was(store, tmp_path):
    reference = _written(b"a" * 5000)
    Path(reference.path.removeprefix("file://")).write_bytes(b"b" * 5000)
    target = tmp_path / "restored.bin"
    target.write_bytes(b"previous")
    with pytest.raises(LargeValueCorruptedError):
        storage.read_into(reference, target)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["objects", "restored.bin"]


@pytest.mark.any_database
def test_a_missing_object_says_so(store):
    reference = _written(b"gone soon")
    storage.remove(reference.path)
    with pytest.raises(LargeValueCorruptedError, match="is missing"):
        b"".join(storage.read(reference))


@pytest.mark.any_database
def test_a_reference_outside_the_configured_storage_is_never_followed(store, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / ("0" * 32)).write_bytes(b"secret")
    forged = large_values.Reference(
        "bytes", f"file://{outside}/{'0' * 32}", 6, blake3.blake3(b"secret").hexdigest(), datetime.now(UTC)
    )
    with pytest.raises(LargeValueError, match="outside \\[state\\] object_storage_path"):
        b"".join(storage.read(forged))


@pytest.mark.any_database
@pytest.mark.parametrize(
    "value",
    [
        {large_values.MARKER: 1},
        {large_values.MARKER: {"format": 2}},
        {large_values.MARKER: {"format": 1, "kind": "json", "path": "file:///x/../etc", "size": 1,
                               "blake3": "0" * 64, "started_at": "2026-01-01T00:00:00+00:00"}},
        {large_values.MARKER: {"format": 1, "kind": "json", "path": f"file:///x/{'0' * 32}", "size": 1,
                               "blake3": "0" * 64, "sha256": "0" * 64,
                               "started_at": "2026-01-01T00:00:00+00:00"}},
        {large_values.MARKER: {"format": 1, "kind": "json", "path": f"file:///x/{'0' * 32}", "size": 1,
                               "md5": "0" * 64, "started_at": "2026-01-01T00:00:00+00:00"}},
    ],
)  # fmt: skip
def test_the_reserved_shape_is_refused_unless_it_is_a_well_formed_reference(value):
    with pytest.raises(LargeValueError):
        codec.encode(value)


@pytest.mark.any_database
def test_task_code_cannot_store_the_reserved_shape_as_its_own_value(store):
    reference = _written(b"x").as_value()
    with pytest.raises(ValueError, match="reserved for references"):
        large.encode(reference, "task_state.set")


@pytest.mark.any_database
def test_without_object_storage_a_large_value_is_refused_saying_how_to_allow_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", "")
    with pytest.raises(ValueError, match=r"max_value_bytes\); set \[state\] object_storage_path"):
        large.encode("x" * 70_000, "task_state.set")


@pytest.mark.any_database
def test_a_large_value_becomes_a_reference_and_reads_back(store, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "1000")
    value = {"rows": list(range(1000)), "name": "ü" * 100}
    text = large.encode(value, "task_state.set")
    assert text.startswith(large_values.TEXT_PREFIX) and len(text) < 400
    assert large.load(json.loads(text), "k", "task_state.get") == value
    small = large.encode({"a": 1}, "task_state.set")
    assert small == '{"a":1}' and large.load({"a": 1}, "k", "task_state.get") == {"a": 1}
    assert len(list(store.iterdir())) == 1  # the small value wrote no object


# --- the commit window --------------------------------------------------------------------------


@pytest.mark.any_database
def test_a_reference_is_stored_only_within_half_the_grace_period_of_its_upload(store, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "2h")
    fresh = _written(b"x")
    assert codec.decode(codec.encode(fresh.as_value())) == fresh.as_value()
    stale = large_values.Reference(
        fresh.kind, fresh.path, fresh.size, fresh.digest, datetime.now(UTC) - timedelta(minutes=61)
    )
    with pytest.raises(LargeValueError, match="longer than the commit window of 1:00:00"):
        codec.encode(stale.as_value())
    ahead = large_values.Reference(
        fresh.kind, fresh.path, fresh.size, fresh.digest, datetime.now(UTC) + timedelta(hours=1)
    )
    with pytest.raises(LargeValueError, match="the worker's clock is wrong"):
        codec.encode(ahead.as_value())


@pytest.mark.any_database
def test_a_staged_file_committed_late_in_its_window_is_sent_as_a_fresh_copy(store, monkeypatch):
    """A staged file is uploaded when staged; a commit past half the window re-uploads it, checked."""
    from airflow_shared.state import StagedOp
    from airflow_task_state.worker.staging import Staged

    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "2h")
    data = os.urandom(100_000)
    written = _written(data)
    recent = Staged(StagedOp.SET, codec.encode(written.as_value()))
    assert recent.as_sent(upload=True) == recent  # within half the window: sent as staged
    old = large_values.Reference(
        written.kind, written.path, written.size, written.digest, datetime.now(UTC) - timedelta(minutes=40)
    )
    sent = Staged(StagedOp.SET, codec.encode(old.as_value())).as_sent(upload=True)
    assert sent.text is not None
    fresh = large_values.parse(json.loads(sent.text))
    assert fresh.path != old.path and (fresh.size, fresh.digest) == (old.size, old.digest)
    assert datetime.now(UTC) - fresh.started_at < timedelta(minutes=1)
    assert b"".join(storage.read(fresh)) == data


# --- a writer killed mid-upload -------------------------------------------------------------------

_SLOW_WRITER = """
import sys, time
from airflow_task_state import object_storage
def chunks():
    for n in range(10_000):
        yield bytes(64 * 1024)
        if n == 20:
            print("writing", flush=True)
        time.sleep(0.01)
object_storage.write(chunks(), "bytes")
print("finished", flush=True)
"""


def test_a_writer_killed_mid_upload_leaves_only_an_unreferenced_object_clean_collects(
    store, backend, make_task_instances, unique, monkeypatch
):
    writer = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    [left] = list(store.iterdir())
    assert 0 < left.stat().st_size < 10_000 * 64 * 1024  # half written, and referenced by nothing
    make_task_instances(f"lv_{unique}", "run", ("t", -1))
    assert collect(backend, dry_run=False).removed == 0  # younger than the grace period: kept
    _age(f"file://{left}", timedelta(days=2))
    assert collect(backend, dry_run=True).removed == 1 and left.exists()
    assert collect(backend, dry_run=False).removed == 1 and not left.exists()


# --- airflow state clean ------------------------------------------------------------------------


def _store_reference(scope, key: str, reference: large_values.Reference) -> None:
    manage.put(scope, key, codec.encode(reference.as_value()))


def test_clean_removes_objects_no_key_references_and_keeps_every_referenced_one(
    store, backend, make_task_instances, make_asset, unique
):
    dag_id = f"lv_{unique}"
    make_task_instances(dag_id, "run", ("t", -1), ("m", 0))
    task, mapped = TaskScope(dag_id, "run", "t"), TaskScope(dag_id, "run", "m", 0)
    asset = AssetScope(make_asset(1))
    kept = {"task": _written(b"1"), "mapped": _written(b"2"), "asset": _written(b"3")}
    _store_reference(task, "k", kept["task"])
    _store_reference(mapped, "k", kept["mapped"])
    _store_reference(asset, "k", kept["asset"])
    overwritten, deleted, expired = _written(b"4"), _written(b"5"), _written(b"6")
    _store_reference(task, "again", overwritten)
    manage.put(task, "again", '"small now"')
    _store_reference(task, "gone", deleted)
    manage.delete(task, "gone")
    manage.put(task, "short", codec.encode(expired.as_value()), ttl=timedelta(seconds=1))
    time.sleep(1.1)
    everything = [*kept.values(), overwritten, deleted, expired]
    for reference in everything:
        _age(reference.path, timedelta(days=2))
    assert set(referenced_paths(backend)) >= {reference.path for reference in kept.values()}
    collected = collect(backend, dry_run=False)
    assert (collected.removed, collected.referenced) == (3, 3)
    assert sorted(p.name for p in store.iterdir()) == sorted(r.name for r in kept.values())
    for scope, reference in ((task, kept["task"]), (mapped, kept["mapped"]), (asset, kept["asset"])):
        stored = large_values.parse(json.loads(backend.get(scope, "k")))
        assert b"".join(storage.read(stored)) == b"".join(storage.read(reference))


def test_clean_collects_the_objects_of_a_deleted_dag_run(store, backend, make_task_instances, unique):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    dag_id = f"lv_{unique}"
    make_task_instances(dag_id, "run", ("t", -1))
    reference = _written(b"of a run")
    _store_reference(TaskScope(dag_id, "run", "t"), "k", reference)
    _age(reference.path, timedelta(days=2))
    assert collect(backend, dry_run=False).removed == 0
    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id))
    assert collect(backend, dry_run=False).removed == 1


def test_the_clean_command_reports_what_it_removed(store, backend, cli, make_task_instances, unique):
    reference = _written(b"z" * 100)
    _age(reference.path, timedelta(days=2))
    out = cli("clean", "--dry-run")
    assert "Would remove 1 object (100 bytes) of large values no key references" in out
    assert "Removed 1 object (100 bytes)" in cli("clean", "-y")
    assert list(store.iterdir()) == []


def test_clean_racing_writers_never_removes_a_referenced_object(
    store, backend, make_task_instances, unique, monkeypatch
):
    # A commit window (half the grace) of 6 s: wider than a reference write takes on a loaded CI
    # machine, as a day's grace is in production; the writers still stall past it at times.
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "12s")
    dag_id = f"lv_{unique}"
    make_task_instances(dag_id, "run", ("t", -1))
    race_writers_and_clean(backend, TaskScope(dag_id, "run", "t"), seconds=12)


def race_writers_and_clean(backend, scope: TaskScope, *, seconds: float) -> None:
    """
    Writers overwrite one key again and again, some stalling between the upload and the reference
    (past the commit window: refused), while clean runs in a loop with the grace period configured
    (12 s): every reference accepted reads back until it is overwritten, and at the end only the
    referenced object is left. The rule the proof rests on (docs/large-values.md) is that a write
    commits within the window of its freshness check: a write a loaded machine stalled past it (a
    put that took over 6 s) is counted, not held against the collector.
    """
    grace = config.object_grace_period().total_seconds()
    stop, failures, accepted, refused = threading.Event(), [], [0], [0]
    stalled: set[str] = set()  # the objects of writes that committed past the window of their check

    def writer(seed: int) -> None:
        chance = random.Random(seed)
        while not stop.is_set():
            data = os.urandom(chance.randrange(1, 200_000))
            reference = _written(data)
            time.sleep(chance.choice([0, 0, 0.2, 0.6, grace * 2 / 3]))  # the last: past the window
            checked = time.monotonic()
            try:
                text = codec.encode(reference.as_value())
            except LargeValueError:
                refused[0] += 1
                continue
            manage.put(scope, "checkpoint", text)
            if time.monotonic() - checked > grace / 2:
                stalled.add(reference.path)
            accepted[0] += 1
            try:  # what is stored now reads back (another writer may have overwritten it: read again)
                current = large_values.parse(json.loads(backend.get(scope, "checkpoint")))
                b"".join(storage.read(current))
            except LargeValueCorruptedError as error:
                if backend.get(scope, "checkpoint") == codec.encode(current.as_value()):
                    failures.append((current.path, error))

    def cleaner() -> None:
        while not stop.is_set():
            collect(backend, dry_run=False)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=cleaner))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    assert [error for path, error in failures if path not in stalled] == []
    assert accepted[0] > 10 and refused[0] > 0 and len(stalled) < accepted[0] / 2
    time.sleep(grace + 0.1)
    collect(backend, dry_run=False)
    current = large_values.parse(json.loads(backend.get(scope, "checkpoint")))
    assert [found.path for found in storage.listing()] == [current.path]
    b"".join(storage.read(current))


@pytest.mark.any_database
def test_bytes_and_file_objects_stream_in_chunks(store, tmp_path):
    source = tmp_path / "checkpoint.bin"
    source.write_bytes(os.urandom(3 * storage.CHUNK_BYTES + 5))
    text = large.store_file(source)
    reference = large_values.parse(json.loads(text))
    assert reference.kind == "bytes" and reference.size == source.stat().st_size
    out = io.BytesIO()
    large.read_file(reference, out)
    assert out.getvalue() == source.read_bytes()
    assert large.read_bytes(large_values.parse(json.loads(large.store_file(b"abc")))) == b"abc"
    with pytest.raises(TypeError, match="read it with get\\(\\)"):
        large.file_reference({"a": 1}, "k", "task_state.get_file")
