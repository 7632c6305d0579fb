"""
State calls from task code against their floor, side by side in one task process.

The floor is what no state API can beat on this machine: one keep-alive HTTP/1.1 request to a
minimal ASGI app on uvicorn that runs one primary-key select, or one upsert, on the deployment's
PostgreSQL database (``_floor.py``), sent by an ``httpx.Client`` as ours are.

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
import tempfile
from pathlib import Path

from _common import parse_args, summary
from _floor import floor_app

GOAL = 0.6

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
    port = dbservers.free_port()
    (dags / "bench_floor.py").write_text(
        DAG.format(ops=args.ops, rounds=args.rounds, floor=f"http://127.0.0.1:{port}", results=str(results))
    )
    with airflow_deployment(dags) as deployment, floor_app(deployment.sql_alchemy_conn, port):
        deployment.wait_for_dag("bench_floor", timeout=120)
        deployment.trigger("bench_floor", "floor")
        state = deployment.wait_for_run("bench_floor", "floor", timeout=300 + args.ops * args.rounds * 0.1)
        if state != "success":
            raise SystemExit(f"the bench run ended {state}:\n{deployment.task_logs('bench_floor', 'floor')}")
    report(json.loads(results.read_text()), args)


def report(samples: dict[str, dict[str, list[float]]], args) -> None:
    print(
        f"\nState calls from one task process, {args.rounds} alternating rounds x {args.ops} calls per side "
        "(ms; rate = the floor's time / ours)"
    )
    print(f"{'op':<5}{'side':<7}{'median':>9}{'mean':>9}{'p99':>9}   rate by median / mean / p99")
    verdicts = []
    for op, by_side in samples.items():
        floor, ours = summary(by_side["floor"]), summary(by_side["ours"])
        for side, measured in (("floor", floor), ("ours", ours)):
            rates = " / ".join(f"{f / m:.2f}" for f, m in zip(floor, measured, strict=True))
            print(f"{op:<5}{side:<7}" + "".join(f"{value:>9.3f}" for value in measured) + f"   {rates}")
        rate = floor[1] / ours[1]
        verdicts.append(
            f"  {op}: ours >= {GOAL}x the floor's rate (means): {rate:.2f}x  "
            + ("met" if rate >= GOAL else "NOT met")
        )
    print("\nGoal (issue 33)\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main()
