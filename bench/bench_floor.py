"""
State calls from task code against their floor, side by side in one task process.

The floor is what no state API can beat on this machine: one keep-alive HTTP/1.1 request to a
minimal ASGI app (no framework, no authentication, no validation) served by uvicorn, as Airflow's
API server is, on the same host, which runs one primary-key select, or one upsert, on the same
PostgreSQL database with psycopg2 on one autocommit connection, into a table keyed as
``task_state`` is. Its client is an ``httpx.Client``, as ours is.

A real deployment (API server, scheduler, dag processor; PostgreSQL) runs one task that times, in
rounds alternating between the sides, ``task_state.set``/``get`` as task code calls them (the API
imported inside the task) and the same operations on the floor. Issue 33's goal: ours at least
0.6x the floor's rate for get and set, by mean; medians and p99 are printed beside.
``bench_metastore.py`` measures the backend alone against its own floor (the same statements on a
raw DBAPI cursor).

    PYTHONPATH=dev uv run --no-sync python bench/bench_floor.py [--ops 500] [--rounds 5]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import parse_args

GOAL = 0.6

FLOOR_APP = '''
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

DAG = """
import json
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, task

OPS, ROUNDS, FLOOR, RESULTS = {ops}, {rounds}, {floor!r}, {results!r}


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def bench_floor():
    @task
    def measure():
        import httpx

        from airflow_task_state import task_state  # inside the task, as Airflow advises

        floor = httpx.Client(base_url=FLOOR)

        def floor_set(key, value):
            body = json.dumps({{"value": value}})
            floor.put("/value", params={{"key": key}}, content=body).raise_for_status()

        def floor_get(key):
            return floor.get("/value", params={{"key": key}}).json()["value"]

        sides = {{
            "set": {{"ours": task_state.set, "floor": floor_set}},
            "get": {{"ours": task_state.get, "floor": floor_get}},
        }}
        for i in range(100):  # warm-up: connections, credential, caches; every key exists
            for side in ("ours", "floor"):
                sides["set"][side](f"key_{{i}}", i)
                sides["get"][side](f"key_{{i}}")
        samples = {{op: {{side: [] for side in by_side}} for op, by_side in sides.items()}}
        for round_ in range(ROUNDS):
            order = ("ours", "floor") if round_ % 2 == 0 else ("floor", "ours")
            for op, by_side in sides.items():
                for side in order:
                    call, timed = by_side[side], samples[op][side]
                    for i in range(OPS):
                        key = f"key_{{i % 100}}"
                        start = time.perf_counter()
                        call(key, i) if op == "set" else call(key)
                        timed.append((time.perf_counter() - start) * 1000)
        Path(RESULTS).write_text(json.dumps(samples))

    measure()


bench_floor()
"""


def main() -> None:
    args = parse_args(__doc__, ops=500).parse_args()
    from state_testing import dbservers
    from state_testing.deployment import airflow_deployment

    work = Path(tempfile.mkdtemp(prefix="state-bench-floor-"))
    dags, results = work / "dags", work / "samples.json"
    dags.mkdir()
    (work / "floor_app.py").write_text(FLOOR_APP)
    port = dbservers.free_port()
    floor_url = f"http://127.0.0.1:{port}"
    (dags / "bench_floor.py").write_text(
        DAG.format(ops=args.ops, rounds=args.rounds, floor=floor_url, results=str(results))
    )
    with airflow_deployment(dags) as deployment:
        dsn = deployment.sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://")
        floor = start_floor(work, port, dsn)
        try:
            deployment.wait_for_dag("bench_floor", timeout=120)
            deployment.trigger("bench_floor", "floor")
            state = deployment.wait_for_run(
                "bench_floor", "floor", timeout=300 + args.ops * args.rounds * 0.1
            )
            if state != "success":
                raise SystemExit(
                    f"the bench run ended {state}:\n{deployment.task_logs('bench_floor', 'floor')}"
                )
        finally:
            floor.terminate()
            floor.wait(10)
    report(json.loads(results.read_text()), args)


def start_floor(work: Path, port: int, dsn: str) -> subprocess.Popen[bytes]:
    """The floor app under uvicorn, with uvicorn's defaults as Airflow's API server takes them."""
    floor = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port), "--log-level", "warning"],
        cwd=work,
        env={**os.environ, "FLOOR_DSN": dsn},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/value", params={"key": "absent"})
            return floor
        except httpx.TransportError:
            time.sleep(0.2)
    floor.kill()
    raise SystemExit("the floor app did not start")


def summary(values: list[float]) -> tuple[float, float, float]:
    """Median, mean and p99 (nearest rank) of *values*."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered) + 0.5) - 1)]
    return ordered[len(ordered) // 2], sum(ordered) / len(ordered), p99


def report(samples: dict[str, dict[str, list[float]]], args) -> None:
    print(
        f"\nState calls from one task process, {args.rounds} alternating rounds x {args.ops} calls per side "
        "(ms; rate = the floor's time / ours)"
    )
    print(f"{'op':<5}{'side':<7}{'median':>9}{'mean':>9}{'p99':>9}   rate by median / mean / p99")
    verdicts = []
    for op, by_side in samples.items():
        floor = summary(by_side["floor"])
        for side in ("floor", "ours"):
            measured = summary(by_side[side])
            rates = " / ".join(f"{f / m:.2f}" for f, m in zip(floor, measured, strict=True))
            print(f"{op:<5}{side:<7}" + "".join(f"{value:>9.3f}" for value in measured) + f"   {rates}")
        rate = floor[1] / summary(by_side["ours"])[1]
        verdicts.append(
            f"  {op}: ours >= {GOAL}x the floor's rate (means): {rate:.2f}x  "
            + ("met" if rate >= GOAL else "NOT met")
        )
    print("\nGoal (issue 33)\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main()
