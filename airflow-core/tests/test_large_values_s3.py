"""
Large values on a real S3 API: moto's server, started here, reached through an Airflow connection
(``s3://conn_id@bucket/prefix``) as a deployment reaches S3: objects written and read back checked,
a corrupted and a missing object, a writer SIGKILLed mid-upload, and clean racing writers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from airflow_shared.state import TaskScope
from airflow_task_state import LargeValueCorruptedError
from airflow_task_state import object_storage as storage
from test_large_values import _written, race_writers_and_clean

pytestmark = pytest.mark.any_database

BUCKET = "state-large-values"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[dict]:
    """A moto S3 server on a free port, a bucket, and the Airflow connection that reaches it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    yield {"client": client, "connection": json.dumps(connection)}
    server.stop()


@pytest.fixture
def s3_store(s3_server, unique, monkeypatch) -> str:
    """``[state] object_storage_path`` on the S3 server, a prefix of its own per test."""
    monkeypatch.setenv("AIRFLOW_CONN_STATE_S3", s3_server["connection"])
    base = f"s3://state_s3@{BUCKET}/{unique}"
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", base)
    return base


def _s3_key(path: str) -> str:
    return path.split(f"{BUCKET}/", 1)[1]


def test_objects_round_trip_through_an_airflow_connection(s3_store, tmp_path):
    # Past s3fs's 50 MiB blocks: a multipart upload, and a download of ranges written out of order.
    data = os.urandom(64 * 1024 * 1024 + 1)
    reference = _written(data)
    assert reference.path.startswith(f"{s3_store}/") and reference.size == len(data)
    assert b"".join(storage.read(reference)) == data
    storage.read_into(reference, tmp_path / "downloaded.bin")  # s3fs's own download, hashed alongside
    assert (tmp_path / "downloaded.bin").read_bytes() == data
    assert [found.path for found in storage.listing()] == [reference.path]


def test_a_changed_or_missing_object_on_s3_is_an_error(s3_server, s3_store, tmp_path):
    reference = _written(b"a" * 100_000)
    s3_server["client"].put_object(Bucket=BUCKET, Key=_s3_key(reference.path), Body=b"b" * 100_000)
    with pytest.raises(LargeValueCorruptedError, match="its blake3 is"):
        b"".join(storage.read(reference))
    with pytest.raises(LargeValueCorruptedError, match="its blake3 is"):
        storage.read_into(reference, tmp_path / "downloaded.bin")
    assert list(tmp_path.iterdir()) == []  # nothing left behind, nothing renamed into place
    storage.remove(reference.path)
    with pytest.raises(LargeValueCorruptedError, match="is missing"):
        b"".join(storage.read(reference))
    with pytest.raises(LargeValueCorruptedError, match="is missing"):
        storage.read_into(reference, tmp_path / "downloaded.bin")


_KILLED_WRITER = """
from airflow_task_state import object_storage
def chunks():
    for n in range(1000):
        yield bytes(1024 * 1024)
        if n == 60:  # past s3fs's first part (its blocks are 50 MiB)
            print("writing", flush=True)
object_storage.write(chunks(), "bytes")
"""


def test_a_writer_killed_mid_upload_leaves_no_object(s3_server, s3_store):
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    # S3 shows an object only once its upload completes: nothing to read, nothing referenced. The
    # parts already sent wait for the bucket's AbortIncompleteMultipartUpload rule (docs/large-values.md).
    assert list(storage.listing()) == []
    uploads = s3_server["client"].list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    prefix = _s3_key(s3_store + "/")
    assert [upload for upload in uploads if upload["Key"].startswith(prefix)]


def test_clean_racing_writers_on_s3_never_removes_a_referenced_object(
    s3_store, backend, make_task_instances, unique, monkeypatch
):
    # A commit window (half the grace) of 6 s: wider than a reference write takes on a loaded CI
    # machine, as a day's grace is in production; the writers still stall past it at times.
    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_GRACE_PERIOD", "12s")
    dag_id = f"lv_s3_{unique}"
    make_task_instances(dag_id, "run", ("t", -1))
    race_writers_and_clean(backend, TaskScope(dag_id, "run", "t"), seconds=12)
