"""
How a task proves its identity to the state API, before and after the handshake, measured from
real task code on a real deployment, both sides in one run.

Before (commit 9e046b6): every worker holds ``[state] api_secret`` and the task process mints a
fresh token for itself on every request. After (this working tree): the first state call of a task
process does the handshake (POST /state/challenges, the proof written through the supervisor into
the rendered fields, POST /state/credentials), and every later call reuses the credential.

Each side is a deployment of the test harness (PostgreSQL, api-server, scheduler with the
LocalExecutor, dag-processor), the before side running the ``airflow`` of a git worktree of 9e046b6
with its own ``uv sync --locked`` environment. A mapped task runs its map indexes one at a time,
each in a fresh task process: it times its first ``task_state.get``, then ``--ops`` sets and
``--ops`` gets, one by one, and writes its samples to a results directory. Medians: the first call
over the processes, steady state over the per-process medians. The two deployments run one after
the other (about a minute each to start), so drift on the machine between them is not averaged out.

    PYTHONPATH=dev uv run --no-sync python bench/bench_identity.py [--processes 8] [--ops 200] [--rounds 1]
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _common import parse_args
from _deployments import RESULTS_VARIABLE, side

BEFORE_COMMIT = "9e046b6"
REPOSITORY = Path(__file__).resolve().parent.parent
DAG_ID = "bench_identity"

# Written into the dags folder with the number of processes and ops filled in. The same file runs
# on both sides: the timing of the handshake's parts is only installed where there is one.
BENCH_DAG = '''
import json
import os
import statistics
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, get_current_context, task
from airflow.state import task_state

OPS = {ops}
PROCESSES = {processes}


def instrument():
    """
    The parts of the first call, timed from the task side: creating the HTTP client (both sides)
    and, after the change, the handshake's steps; and the count of handshakes. Everything but the
    handshake counter is removed after the first call, so that steady-state requests run the
    client's code untouched.
    """
    from airflow.state.worker import client

    found = {{"handshakes": 0, "handshake_ms": None, "parts": {{}}}}
    sync_client = client._sync_client

    def timed_sync_client(*args):
        start = time.perf_counter()
        try:
            return sync_client(*args)
        finally:
            found["parts"].setdefault("http client created", (time.perf_counter() - start) * 1000)

    client._sync_client = timed_sync_client
    if not hasattr(client, "_credentials"):

        def uninstall_before():
            client._sync_client = sync_client

        return found, uninstall_before
    cls = client.StateClient
    new_credential, send, proof_cm = cls._new_credential, cls._send, client.proof_in_rendered_fields

    def counted_new_credential(self):
        found["handshakes"] += 1
        start = time.perf_counter()
        try:
            return new_credential(self)
        finally:
            if found["handshake_ms"] is None:
                found["handshake_ms"] = (time.perf_counter() - start) * 1000

    def timed_send(self, method, path, **kwargs):
        start = time.perf_counter()
        try:
            return send(self, method, path, **kwargs)
        finally:
            if path in (client.CHALLENGES_PATH, client.CREDENTIALS_PATH):
                found["parts"][f"POST {{path}}"] = (time.perf_counter() - start) * 1000

    @contextmanager
    def timed_proof(*args):
        manager = proof_cm(*args)
        start = time.perf_counter()
        manager.__enter__()
        found["parts"]["proof written (supervisor)"] = (time.perf_counter() - start) * 1000
        try:
            yield
        finally:
            start = time.perf_counter()
            manager.__exit__(None, None, None)
            found["parts"]["fields restored (supervisor)"] = (time.perf_counter() - start) * 1000

    cls._new_credential, cls._send, client.proof_in_rendered_fields = (
        counted_new_credential, timed_send, timed_proof
    )

    def uninstall():
        client._sync_client, cls._send, client.proof_in_rendered_fields = sync_client, send, proof_cm

    return found, uninstall


def disjoint(parts, first_ms):
    """The parts as disjoint intervals: the client is created inside the first request sent."""
    parts = dict(parts)
    if "POST /challenges" in parts:
        parts["POST /challenges"] -= parts.get("http client created", 0.0)
    parts["the GET itself"] = first_ms - sum(parts.values())
    return parts


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def {dag_id}():
    @task(max_active_tis_per_dag=1)
    def measure(index):
        found, uninstall = instrument()
        start = time.perf_counter()
        task_state.get("k")
        first_ms = (time.perf_counter() - start) * 1000
        uninstall()
        set_ms, get_ms = [], []
        for i in range(OPS):
            start = time.perf_counter()
            task_state.set(f"key_{{i % 100}}", i)
            set_ms.append((time.perf_counter() - start) * 1000)
        for i in range(OPS):
            start = time.perf_counter()
            task_state.get(f"key_{{i % 100}}")
            get_ms.append((time.perf_counter() - start) * 1000)

        from airflow.state.worker import client

        held = getattr(client, "_credentials", None)
        ti = get_current_context()["ti"]
        sample = {{
            "map_index": ti.map_index,
            "pid": os.getpid(),
            "first_ms": first_ms,
            "set_ms": statistics.median(set_ms),
            "get_ms": statistics.median(get_ms),
            "handshakes": found["handshakes"],
            "handshake_ms": found["handshake_ms"],
            "credentials_held": None if held is None else sum(1 for pid, _ in held if pid == os.getpid()),
            "parts": disjoint(found["parts"], first_ms),
        }}
        results = Path(os.environ["{results_variable}"])
        (results / f"{{ti.run_id}}-{{ti.map_index}}.json").write_text(json.dumps(sample))

    measure.expand(index=list(range(PROCESSES)))


{dag_id}()
'''


def main() -> None:
    parser = parse_args(__doc__, ops=200)
    parser.add_argument("--processes", type=int, default=8, help="map indexes (task processes) per run")
    parser.set_defaults(rounds=1)
    next(a for a in parser._actions if a.dest == "rounds").help = "DAG runs per side"
    args = parser.parse_args()

    dags = Path(tempfile.mkdtemp(prefix="state-bench-dags-"))
    (dags / f"{DAG_ID}.py").write_text(
        BENCH_DAG.format(
            ops=args.ops, processes=args.processes, dag_id=DAG_ID, results_variable=RESULTS_VARIABLE
        )
    )
    try:
        started = time.monotonic()
        with before_checkout(BEFORE_COMMIT) as before_airflow:
            print(f"before environment ready in {time.monotonic() - started:.0f}s", flush=True)
            before = run_side(
                "before",
                before_airflow,
                {"AIRFLOW__STATE__API_SECRET": secrets.token_urlsafe(48)},
                dags,
                args,
            )
        after = run_side("after", Path(sys.executable).with_name("airflow"), {}, dags, args)
    finally:
        shutil.rmtree(dags, ignore_errors=True)
    report(before, after, args)


@contextlib.contextmanager
def before_checkout(commit: str) -> Iterator[Path]:
    """A worktree of *commit* with its own locked environment; yields its ``airflow`` binary."""
    parent = Path(tempfile.mkdtemp(prefix="state-bench-before-"))
    worktree = parent / "worktree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(worktree), commit],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
    )
    try:
        # Not the environment of this process: uv would warn and use the worktree's .venv anyway.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
        subprocess.run(["uv", "sync", "--locked", "--quiet"], cwd=worktree, env=env, check=True)
        yield worktree / ".venv" / "bin" / "airflow"
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPOSITORY, check=False)
        shutil.rmtree(parent, ignore_errors=True)


def run_side(
    name: str, airflow: Path, extra_env: dict[str, str], dags: Path, args
) -> list[dict[str, object]]:
    """Start a deployment with *airflow*, run the bench DAG *args.rounds* times, return the samples."""
    from state_testing import deployment as harness

    started = time.monotonic()
    with side(name, dags, airflow, extra_env) as running:
        running.deployment.wait_for_dag(DAG_ID, timeout=180)
        for round_ in range(args.rounds):
            running.run_dag(DAG_ID, f"{name}-{round_}", timeout=120 + 30 * args.processes)
        challenges = server_side_count(running.deployment.home / "api-server.log", "POST /state/challenges")
        samples = running.samples()
        if len(samples) != args.processes * args.rounds:
            raise harness.DeploymentError(f"{len(samples)} result files\n{running.deployment.logs()}")
        for sample in samples:
            sample["server_challenges"] = challenges
    print(f"{name}: done in {time.monotonic() - started:.0f}s", flush=True)
    return samples


def server_side_count(log: Path, request: str) -> int | None:
    """How many *request* lines the API server's access log shows (None without an access log)."""
    with contextlib.suppress(OSError):
        text = log.read_text(errors="replace")
        if "GET /state/" in text or request in text:
            return text.count(request)
    return None


def report(before: list[dict], after: list[dict], args) -> None:
    def median(samples: list[dict], field: str) -> float:
        return statistics.median(float(s[field]) for s in samples)

    print(
        f"\nTask identity: a token minted per request ({BEFORE_COMMIT}) vs the handshake and a reused "
        f"credential (working tree),\n{len(before)} task processes per side, {args.ops} sets and "
        f"{args.ops} gets each"
    )
    print(f"{'median ms':<34}{'before':>10}{'after':>10}{'after/before':>14}")
    for label, field in (("first get", "first_ms"), ("steady get", "get_ms"), ("steady set", "set_ms")):
        b, a = median(before, field), median(after, field)
        print(f"{label:<34}{b:>10.2f}{a:>10.2f}{a / b:>14.2f}")

    print("\nThe first get, part by part from the task side (median ms over the processes)")
    for name in PARTS:
        cells = []
        for samples in (before, after):
            values = [s["parts"][name] for s in samples if name in s["parts"]]
            cells.append(f"{statistics.median(values):>10.2f}" if values else f"{'-':>10}")
        print(f"  {name:<32}{''.join(cells)}")
    print(f"  {'handshake (total)':<32}{'-':>10}{median(after, 'handshake_ms'):>10.2f}")

    handshakes = sorted({s["handshakes"] for s in after})
    held = sorted({s["credentials_held"] for s in after})
    print(
        f"\nhandshakes per task process (after): {', '.join(map(str, handshakes))}; "
        f"credentials cached per process: {', '.join(map(str, held))}"
    )
    server = after[0]["server_challenges"]
    if server is not None:
        print(f"POST /state/challenges in the api-server log (after): {server} for {len(after)} processes")
    if any(s["handshakes"] != 1 or s["credentials_held"] != 1 for s in after):
        raise SystemExit("after: a task process did not do exactly one handshake")


# The parts of the first call, in the order they happen (disjoint: see disjoint() in the DAG).
PARTS = (
    "http client created",
    "POST /challenges",
    "proof written (supervisor)",
    "POST /credentials",
    "fields restored (supervisor)",
    "the GET itself",
)


if __name__ == "__main__":
    main()
