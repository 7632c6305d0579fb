"""
State calls from real task processes, three sides in one run: Airflow 3.3.2's own store, this project
on the same Airflow 3.3.2, and this project on Airflow 3.2.2.

Two deployments of the test harness run at once, each on a PostgreSQL server of its own (the same
server binary), with an api-server, a scheduler (LocalExecutor) and a dag-processor: Airflow 3.3.2
from its cached environment (``dev/state_testing/airflow33.py``, which holds this tree's
distributions; ``[state_store] backend`` left at Airflow's own), and a deployer's Airflow 3.2.2 with
this tree's wheels, installed as the install docs say. The same DAG file runs on both; each run's
conf names the API its tasks use, so the 3.3.2 deployment serves two sides. A mapped task whose map
indexes run one at a time, each in a fresh task process,

1. times its first state call (a ``get`` of an absent key) as task code makes it: the API's import
   (``from airflow_task_state import task_state`` inside the task function, as Airflow advises) or
   ``context["task_state_store"]``, and the call; whatever the client does first (on 3.3.2 the
   supervisor's Execution API call; ours the handshake) is in it;
2. times ``--ops`` single sets, then ``--ops`` single gets, one by one;
3. times 100 keys written and read back, five times: with 3.3.2's accessor 100 ``set`` and 100
   ``get`` calls (it has no batch call), with ours one ``set_many`` and one ``get_many``.

Runs rotate through the sides (``--rounds`` runs each), so drift on the machine hits all alike.
Median, mean and p99: the first call over all task processes of a side, the others over every call.

    PYTHONPATH=dev uv run --no-sync python bench/bench_vs_airflow33.py [--processes 4] [--rounds 2] \\
        [--ops 200]
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
from pathlib import Path

from _common import parse_args
from _deployments import (
    airflow33_program,
    airflow322_program,
    dags_folder,
    side,
    wait_for_dags,
    with_bytecode,
)

DAG_ID = "bench_vs_airflow33"
# Each side: its label, the deployment it runs on, and the API its tasks use (the runs' conf).
AIRFLOW33, OURS33, OURS32 = "3.3.2's own store", "ours on 3.3.2", "ours on 3.2.2"
SIDES = {AIRFLOW33: ("3.3.2", "airflow"), OURS33: ("3.3.2", "ours"), OURS32: ("3.2.2", "ours")}

# Goals: the first call at most 2x 3.3.2's, steady calls at least 3x faster.
FIRST_CALL_GOAL = 2.0
STEADY_GOAL = 3.0

# One DAG file for every side: the run's conf says which API its tasks use.
BENCH_DAG = '''
import json
import os
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, get_current_context, task

OPS = {ops}
PROCESSES = {processes}
HUNDRED_REPEATS = 5
OFFSETS = {{f"partition-{{p}}": p * 1000 for p in range(100)}}


def store(api):
    """get, set, get 100 keys, set 100 keys: as task code calls them with *api*."""
    if api == "ours":
        from airflow_task_state import task_state  # inside the task function, as Airflow advises

        return task_state.get, task_state.set, task_state.get_many, task_state.set_many
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
        context = get_current_context()
        start = time.perf_counter()
        get, set_, get_100, set_100 = store(context["dag_run"].conf["api"])
        import_ms = (time.perf_counter() - start) * 1000
        get("absent")
        first_ms = (time.perf_counter() - start) * 1000
        set_ms = [timed_ms(set_, f"key_{{i % 100}}", i) for i in range(OPS)]
        get_ms = [timed_ms(get, f"key_{{i % 100}}") for i in range(OPS)]
        set_100_ms, get_100_ms = [], []
        for repeat in range(HUNDRED_REPEATS):
            values = {{key: offset + repeat for key, offset in OFFSETS.items()}}
            set_100_ms.append(timed_ms(set_100, values))
            get_100_ms.append(timed_ms(get_100, list(OFFSETS)))
        if get_100(list(OFFSETS)) != values:
            raise RuntimeError("the 100 keys did not read back as written")
        sample = {{
            "first_ms": [first_ms],
            "import_ms": [import_ms],
            "set_ms": set_ms,
            "get_ms": get_ms,
            "set_100_ms": set_100_ms,
            "get_100_ms": get_100_ms,
        }}
        results = Path(os.environ["{results_variable}"])
        ti = context["ti"]
        (results / f"{{ti.run_id}}-{{ti.map_index}}.json").write_text(json.dumps(sample))

    measure.expand(index=list(range(PROCESSES)))


{dag_id}()
'''


def main() -> None:
    parser = parse_args(__doc__, ops=200)
    parser.add_argument("--processes", type=int, default=4, help="map indexes (task processes) per run")
    parser.set_defaults(rounds=2)
    next(a for a in parser._actions if a.dest == "rounds").help = "DAG runs per side, rotating"
    args = parser.parse_args()

    from _deployments import RESULTS_VARIABLE

    source = BENCH_DAG.format(
        ops=args.ops, processes=args.processes, dag_id=DAG_ID, results_variable=RESULTS_VARIABLE
    )
    with dags_folder({f"{DAG_ID}.py": source}) as dags, contextlib.ExitStack() as stack:
        airflow322 = airflow322_program(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        deployments = {
            "3.3.2": stack.enter_context(side("airflow 3.3.2", dags, with_bytecode(airflow33_program()))),
            "3.2.2": stack.enter_context(side("airflow 3.2.2", dags, with_bytecode(airflow322))),
        }
        wait_for_dags(list(deployments.values()), [DAG_ID])
        names = list(SIDES)
        for round_ in range(args.rounds):
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                line, api = SIDES[name]
                timeout = 120 + 30 * args.processes
                deployments[line].run_dag(DAG_ID, f"{api}-r{round_}", timeout, conf={"api": api})
                print(f"{name}: run {round_} done", flush=True)
        samples = {name: deployments[line].samples(f"{api}-") for name, (line, api) in SIDES.items()}
    for name, found in samples.items():
        if len(found) != args.processes * args.rounds:
            raise SystemExit(f"{name}: {len(found)} samples, expected {args.processes * args.rounds}")
    report(samples, args)


ROWS = (
    ("first call (import + get)", "first_ms"),
    ("  of which the import", "import_ms"),
    ("steady get", "get_ms"),
    ("steady set", "set_ms"),
    ("get 100 keys", "get_100_ms"),
    ("set 100 keys", "set_100_ms"),
)


def summary(values: list[float]) -> tuple[float, float, float]:
    """Median, mean and p99 (nearest rank) of *values*."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered) + 0.5) - 1)]
    return statistics.median(ordered), statistics.mean(ordered), p99


def report(samples: dict[str, list[dict]], args) -> None:
    processes = args.processes * args.rounds
    print(
        f"\nState calls from task code, {processes} fresh task processes per side ({args.rounds} runs x "
        f"{args.processes}), {args.ops} sets and {args.ops} gets each;\n100 keys: 3.3.2's accessor 100 "
        "single calls, ours one get_many/set_many (5 per process). Ratios: time against 3.3.2's own store."
    )
    header = f"{'ms':<27}{'side':<20}{'median':>9}{'mean':>9}{'p99':>9}"
    print(f"{header}{'x median':>10}{'x mean':>8}{'x p99':>8}")
    stats = {}
    for label, field in ROWS:
        for name, found in samples.items():
            stats[field, name] = summary([value for sample in found for value in sample[field]])
            (median, mean, p99), base = stats[field, name], stats[field, AIRFLOW33]
            print(
                f"{label:<27}{name:<20}{median:>9.2f}{mean:>9.2f}{p99:>9.2f}"
                f"{median / base[0]:>10.2f}{mean / base[1]:>8.2f}{p99 / base[2]:>8.2f}"
            )
            label = ""

    print("\nGoals (medians)")
    for name in (OURS33, OURS32):
        first = stats["first_ms", name][0] / stats["first_ms", AIRFLOW33][0]
        verdict = "met" if first <= FIRST_CALL_GOAL else "NOT met"
        print(f"  {name}: first call <= {FIRST_CALL_GOAL:g}x 3.3.2's: {first:.2f}x  {verdict}")
        for field, label in (("get_ms", "steady get"), ("set_ms", "steady set")):
            speedup = stats[field, AIRFLOW33][0] / stats[field, name][0]
            verdict = "met" if speedup >= STEADY_GOAL else "NOT met"
            print(f"  {name}: {label} >= {STEADY_GOAL:g}x faster than 3.3.2: {speedup:.2f}x  {verdict}")


if __name__ == "__main__":
    main()
