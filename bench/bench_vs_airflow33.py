"""
State calls from real task processes: Airflow 3.3.2's built-in store against this project, side by
side in one run.

Two deployments of the test harness run at once, each on a PostgreSQL server of its own (the same
server binary), with an api-server, a scheduler (LocalExecutor) and a dag-processor: one is Airflow
3.3.2 from its cached environment (``dev/state_testing/airflow33.py``), the other Airflow 3.2 with
this project. The same DAG file runs on both: a mapped task whose map indexes run one at a time,
each in a fresh task process, that

1. times its first state call (a ``get`` of an absent key), as task code sees it: whatever the
   client does first (on 3.3.2 the supervisor's Execution API call; here the handshake) is in it;
2. times ``--ops`` single sets, then ``--ops`` single gets, one by one;
3. times 100 keys written and read back, five times: on 3.3.2 100 ``set`` and 100 ``get`` calls
   (it has no batch call), here one ``set_many`` and one ``get_many``.

3.3.2's store is reached as its task code reaches it, ``context["task_state_store"]`` (each call a
message to the supervisor, which calls the Execution API); this project's through
``airflow_task_state.task_state``. Runs alternate between the sides (``--rounds`` runs each, the first
side swapped every round), so drift on the machine hits both alike. Medians: the first call over
all task processes of a side, the others over the per-process medians.

    PYTHONPATH=dev uv run --no-sync python bench/bench_vs_airflow33.py [--processes 4] [--rounds 2] \\
        [--ops 200]
"""

from __future__ import annotations

import contextlib
import statistics

from _common import parse_args
from _deployments import airflow33_program, dags_folder, side, wait_for_dags

DAG_ID = "bench_vs_airflow33"
AIRFLOW33, OURS = "airflow 3.3.2", "this project"

# Goals: the first call at most 2x 3.3.2's, steady calls at least 3x faster.
FIRST_CALL_GOAL = 2.0
STEADY_GOAL = 3.0

# One DAG file for both sides: the side is told by which store the environment has.
BENCH_DAG = '''
import json
import os
import statistics
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, get_current_context, task

OPS = {ops}
PROCESSES = {processes}
HUNDRED_REPEATS = 5
OFFSETS = {{f"partition-{{p}}": p * 1000 for p in range(100)}}

try:
    from airflow_task_state import task_state  # this project (Airflow 3.2)
except ImportError:  # Airflow 3.3's own airflow.state has no task_state
    task_state = None


def store():
    """get, set, get 100 keys, set 100 keys: as task code of this side calls them."""
    if task_state is not None:
        return (
            task_state.get,
            task_state.set,
            lambda keys: task_state.get_many(keys),
            lambda values: task_state.set_many(values),
        )
    accessor = get_current_context()["task_state_store"]

    def get_100(keys):
        return {{key: accessor.get(key) for key in keys}}

    def set_100(values):
        for key, value in values.items():
            accessor.set(key, value)

    return accessor.get, accessor.set, get_100, set_100


def timed_ms(call, *args):
    start = time.perf_counter()
    call(*args)
    return (time.perf_counter() - start) * 1000


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def {dag_id}():
    @task(max_active_tis_per_dag=1)
    def measure(index):
        get, set_, get_100, set_100 = store()
        first_ms = timed_ms(get, "absent")
        set_ms = [timed_ms(set_, f"key_{{i % 100}}", i) for i in range(OPS)]
        get_ms = [timed_ms(get, f"key_{{i % 100}}") for i in range(OPS)]
        set_100_ms, get_100_ms = [], []
        for repeat in range(HUNDRED_REPEATS):
            values = {{key: offset + repeat for key, offset in OFFSETS.items()}}
            set_100_ms.append(timed_ms(set_100, values))
            get_100_ms.append(timed_ms(get_100, list(OFFSETS)))
        if get_100(list(OFFSETS)) != values:
            raise RuntimeError("the 100 keys did not read back as written")
        ti = get_current_context()["ti"]
        sample = {{
            "first_ms": first_ms,
            "set_ms": statistics.median(set_ms),
            "get_ms": statistics.median(get_ms),
            "set_100_ms": statistics.median(set_100_ms),
            "get_100_ms": statistics.median(get_100_ms),
            "pid": os.getpid(),
        }}
        results = Path(os.environ["{results_variable}"])
        (results / f"{{ti.run_id}}-{{ti.map_index}}.json").write_text(json.dumps(sample))

    measure.expand(index=list(range(PROCESSES)))


{dag_id}()
'''


def main() -> None:
    parser = parse_args(__doc__, ops=200)
    parser.add_argument("--processes", type=int, default=4, help="map indexes (task processes) per run")
    parser.set_defaults(rounds=2)
    next(a for a in parser._actions if a.dest == "rounds").help = "DAG runs per side, alternating"
    args = parser.parse_args()

    from _deployments import RESULTS_VARIABLE

    source = BENCH_DAG.format(
        ops=args.ops, processes=args.processes, dag_id=DAG_ID, results_variable=RESULTS_VARIABLE
    )
    with dags_folder({f"{DAG_ID}.py": source}) as dags, contextlib.ExitStack() as stack:
        sides = [
            stack.enter_context(side(AIRFLOW33, dags, airflow33_program())),
            stack.enter_context(side(OURS, dags)),
        ]
        wait_for_dags(sides, [DAG_ID])
        for round_ in range(args.rounds):
            for each in sides if round_ % 2 == 0 else sides[::-1]:
                each.run_dag(DAG_ID, f"r{round_}", timeout=120 + 30 * args.processes)
                print(f"{each.name}: run {round_} done", flush=True)
        samples = {each.name: each.samples() for each in sides}
    for name, found in samples.items():
        if len(found) != args.processes * args.rounds:
            raise SystemExit(f"{name}: {len(found)} samples, expected {args.processes * args.rounds}")
    report(samples, args)


ROWS = (
    ("first state call (a get)", "first_ms"),
    ("steady get", "get_ms"),
    ("steady set", "set_ms"),
    ("get 100 keys", "get_100_ms"),
    ("set 100 keys", "set_100_ms"),
)


def report(samples: dict[str, list[dict]], args) -> None:
    theirs, ours = samples[AIRFLOW33], samples[OURS]
    print(
        f"\nState calls from task code, {len(ours)} fresh task processes per side ({args.rounds} runs "
        f"alternating x {args.processes}), {args.ops} sets and {args.ops} gets each;\n100 keys: 3.3.2 100 "
        "single calls, this project one get_many/set_many (median of 5 per process)"
    )
    print(f"{'median ms':<28}{AIRFLOW33:>15}{OURS:>15}{'ours/3.3.2':>12}{'3.3.2/ours':>12}")
    medians = {}
    for label, field in ROWS:
        a = statistics.median(float(s[field]) for s in theirs)
        b = statistics.median(float(s[field]) for s in ours)
        medians[field] = (a, b)
        print(f"{label:<28}{a:>15.2f}{b:>15.2f}{b / a:>12.2f}{a / b:>12.2f}")
    spread = {
        name: f"{min(s['first_ms'] for s in found):.1f}-{max(s['first_ms'] for s in found):.1f}"
        for name, found in samples.items()
    }
    print(
        f"first call, range over the processes (ms): 3.3.2 {spread[AIRFLOW33]}, this project {spread[OURS]}"
    )

    print("\nGoals")
    first = medians["first_ms"][1] / medians["first_ms"][0]
    verdict = "met" if first <= FIRST_CALL_GOAL else "NOT met"
    print(f"  first call <= {FIRST_CALL_GOAL:g}x 3.3.2's: {first:.2f}x  {verdict}")
    for field, label in (("get_ms", "steady get"), ("set_ms", "steady set")):
        speedup = medians[field][0] / medians[field][1]
        verdict = "met" if speedup >= STEADY_GOAL else "NOT met"
        print(f"  {label} >= {STEADY_GOAL:g}x faster than 3.3.2: {speedup:.2f}x  {verdict}")


if __name__ == "__main__":
    main()
