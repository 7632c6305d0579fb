"""
Task state through the API against the backend called directly, measured side by side in one run;
then a checkpoint of 100 offsets, as one batch (``set_many``/``get_many``) against 100 single calls,
through the API and on the backend.

A real ``airflow api-server`` (with scheduler and dag processor: the test deployment) runs on
PostgreSQL, and a task of a bench DAG stays running meanwhile. One side is what that task's code
does after its handshake: a client holding a credential for it (signed as the API server signs
them) sends GET and PUT requests to the state API. The other side is MetastoreStateBackend called
in this process on the same database.

    PYTHONPATH=dev uv run --no-sync python bench/bench_api.py [--ops 1000] [--rounds 5]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from _common import measure, parse_args


def main() -> None:
    args = parse_args(__doc__, ops=1000).parse_args()

    from state_testing.deployment import airflow_deployment

    dags = Path(tempfile.mkdtemp(prefix="state-bench-dags-"))
    (dags / "bench_holder.py").write_text(HOLDER_DAG)
    with airflow_deployment(dags) as deployment:
        deployment.wait_for_dag("bench_holder", timeout=120)
        deployment.trigger("bench_holder", "bench")
        ti = wait_until_running(deployment)
        # This process plays the task (after its handshake) and, for the direct side, the API
        # server's backend.
        for name in ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
            os.environ[name] = deployment.env[name]
        os.environ["AIRFLOW__STATE__API_URL"] = f"{deployment.api_url}/state"
        # Imports Airflow: only now that its environment is this deployment's.
        from state_testing.credentials import credential_for

        run(args, ti, credential_for(deployment.env, ti))
        (dags / "release").write_text("")


# A task that stays running while the benchmark speaks for it with its credential.
HOLDER_DAG = """
import time
from datetime import datetime
from pathlib import Path
from airflow.sdk import dag, task

@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def bench_holder():
    @task
    def hold():
        while not (Path(__file__).parent / "release").exists():
            time.sleep(0.5)
    hold()

bench_holder()
"""


def wait_until_running(deployment) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = deployment.query(
            "SELECT id, dag_id, run_id, task_id, map_index, try_number FROM task_instance "
            "WHERE run_id = 'bench' AND state = 'running'"
        )
        if rows:
            return rows[0]
        time.sleep(0.5)
    raise TimeoutError(deployment.logs())


def run(args, ti: dict, credential: str) -> None:
    from airflow_shared.state import TaskScope
    from airflow_task_state import codec
    from airflow_task_state.metastore import MetastoreStateBackend
    from airflow_task_state.protocol import TASK_VALUE_PATH, TASK_VALUES_PATH
    from airflow_task_state.worker import client as state_client

    # What StateClient reads of the running task instance.
    running = SimpleNamespace(**ti)  # id, dag_id, run_id, task_id, map_index, try_number
    client = state_client.StateClient(running)
    # The credential the task's handshake would have left in the cache, never renewed here.
    state_client._credentials[(os.getpid(), client.ti_id)] = state_client._Credential(
        credential, renew_at=float("inf"), expires_at=float("inf")
    )
    value_path = TASK_VALUE_PATH.format(task_instance_id=client.ti_id)
    backend = MetastoreStateBackend()
    scope = TaskScope(ti["dag_id"], ti["run_id"], ti["task_id"], ti["map_index"])
    keys = [f"key_{i % 100}" for i in range(args.ops)]

    medians = measure(
        {
            "set": {
                "api": lambda i: client.request(
                    "PUT", value_path, params={"key": keys[i]}, content='{"value":' + codec.encode(i) + "}"
                ),
                "backend": lambda i: backend.set(scope, keys[i], codec.encode(i)),
            },
            "get": {
                "api": lambda i: client.request("GET", value_path, params={"key": keys[i]}).json(),
                "backend": lambda i: backend.get(scope, keys[i]),
            },
        },
        args.ops,
        args.rounds,
    )

    print(
        "\nState API round trip vs backend called directly (PostgreSQL), "
        f"{args.rounds} rounds x {args.ops} ops"
    )
    print(f"{'op':<5}{'api ops/s':>12}{'backend ops/s':>16}{'api/backend':>13}")
    for op, by_side in medians.items():
        api, direct = by_side["api"], by_side["backend"]
        print(f"{op:<5}{api:>12.0f}{direct:>16.0f}{api / direct:>13.2f}")

    values_path = TASK_VALUES_PATH.format(task_instance_id=client.ti_id)
    checkpoints(args, client, backend, scope, value_path, values_path)


def checkpoints(args, client, backend, scope, value_path: str, values_path: str) -> None:
    """100 offsets written and read back: one batch against 100 calls, through the API and direct."""
    import json

    offsets = {f"partition-{p}": p * 1000 for p in range(100)}
    stored = {key: str(offset) for key, offset in offsets.items()}
    batch_body = json.dumps({"values": offsets})
    keys_body = json.dumps({"keys": list(offsets)})

    def api_singles_set(i: int) -> None:
        for key, offset in offsets.items():
            client.request("PUT", value_path, params={"key": key}, content=f'{{"value":{offset + i}}}')

    def api_singles_get(i: int) -> None:
        for key in offsets:
            client.request("GET", value_path, params={"key": key})

    def backend_singles_set(i: int) -> None:
        for key, text in stored.items():
            backend.set(scope, key, text)

    def backend_singles_get(i: int) -> None:
        for key in stored:
            backend.get(scope, key)

    ops = max(args.ops // 100, 5)
    medians = measure(
        {
            "set 100 (api)": {
                "batch": lambda i: client.request("PUT", values_path, content=batch_body),
                "singles": api_singles_set,
            },
            "get 100 (api)": {
                "batch": lambda i: client.request("POST", values_path + "/read", content=keys_body).json(),
                "singles": api_singles_get,
            },
            "set 100 (backend)": {
                "batch": lambda i: backend.set_many(scope, stored),
                "singles": backend_singles_set,
            },
            "get 100 (backend)": {
                "batch": lambda i: backend.get_many(scope, list(stored)),
                "singles": backend_singles_get,
            },
        },
        ops,
        args.rounds,
    )
    print(
        "\nA checkpoint of 100 offsets: one batch vs 100 single calls (PostgreSQL), "
        f"{args.rounds} rounds x {ops}"
    )
    print(f"{'op':<19}{'batch ms':>10}{'singles ms':>12}{'speed-up':>10}")
    for op, by_side in medians.items():
        batch, singles = 1000 / by_side["batch"], 1000 / by_side["singles"]
        print(f"{op:<19}{batch:>10.2f}{singles:>12.2f}{singles / batch:>9.1f}x")


if __name__ == "__main__":
    main()
