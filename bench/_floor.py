"""
The floor under a state request, shared by the benchmarks that compare with it: a minimal ASGI app
(no framework, no authentication, no validation) served by uvicorn, as Airflow's API server is, on
this host, whose every request runs one primary-key select, or one upsert, with psycopg2 on one
autocommit connection to the given PostgreSQL database, in a table keyed as ``task_state`` is.
``GET /value?key=K`` answers ``{"value": ...}`` (404 when absent); ``PUT /value?key=K`` with
``{"value": ...}`` stores it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

APP = '''
"""The floor: one request, one statement, nothing else."""
import json
import os
from urllib.parse import parse_qs

import psycopg2

connection = psycopg2.connect(os.environ["FLOOR_DSN"])
connection.autocommit = True
cursor = connection.cursor()
cursor.execute(
    "CREATE TABLE IF NOT EXISTS floor_state (dag_run_id INTEGER, task_id VARCHAR(250), "
    "map_index INTEGER, key VARCHAR(512), value TEXT, PRIMARY KEY (dag_run_id, task_id, map_index, key))"
)
SELECT = (
    "SELECT value FROM floor_state "
    "WHERE dag_run_id = 1 AND task_id = 'measure' AND map_index = -1 AND key = %s"
)
UPSERT = (
    "INSERT INTO floor_state VALUES (1, 'measure', -1, %s, %s) "
    "ON CONFLICT (dag_run_id, task_id, map_index, key) DO UPDATE SET value = EXCLUDED.value"
)


async def app(scope, receive, send):
    if scope["type"] != "http":  # lifespan: nothing to start
        return
    key = parse_qs(scope["query_string"].decode())["key"][0]
    if scope["method"] == "PUT":
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        cursor.execute(UPSERT, (key, json.dumps(json.loads(body)["value"])))
        status, payload = 200, b'{"written": true}'
    else:
        cursor.execute(SELECT, (key,))
        row = cursor.fetchone()
        status, payload = (200, ('{"value":' + row[0] + "}").encode()) if row else (404, b"{}")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
'''


@contextlib.contextmanager
def floor_app(sql_alchemy_conn: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The floor app on 127.0.0.1:*port*, on the database of *sql_alchemy_conn*, until the block ends."""
    work = Path(tempfile.mkdtemp(prefix="state-bench-floor-app-"))
    (work / "floor_app.py").write_text(APP)
    dsn = sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://")
    # uvicorn's defaults (httptools, its event loop), as `airflow api-server` takes them.
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "floor_app:app",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    floor = subprocess.Popen(command, cwd=work, env={**os.environ, "FLOOR_DSN": dsn})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/value", params={"key": "absent"})
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or floor.poll() is not None:
                    raise SystemExit("the floor app did not start") from None
                time.sleep(0.2)
        yield floor
    finally:
        floor.terminate()
        floor.wait(10)
