"""
Load at the API server: Airflow 3.3.2's state store against this project's state API, side by side
in one run.

Each side is a deployment of the test harness (its own PostgreSQL server, api-server, scheduler with
the LocalExecutor, dag-processor), Airflow 3.3.2 from its cached environment on one side, Airflow
3.2 with this project on the other; they run at the same time. On each, ``--tis`` task instances
of one mapped task stay running (each sleeps until released or ``--hold`` seconds), so every
request is checked against a running try, as a task's would be. Then, for each number of clients
in ``--clients``, ``--rounds`` points per side, the sides alternating (the first swapped every
round): ``C`` concurrent clients, client ``i`` speaking for task instance ``i % tis``, each sending
one request at a time over a keep-alive connection, alternately a GET and a PUT of one of ten keys
of its own (no two clients write the same row), for ``--seconds`` after ``--warmup`` seconds.

What a client sends is what a task process sends after its first call:

- 3.3.2: ``GET``/``PUT /execution/store/ti/{id}/{key}`` of its Execution API, with the task
  instance's Airflow execution token, minted as the scheduler and the Execution API mint them
  (``JWTGenerator`` of the 3.3.2 environment, with the deployment's jwt_secret);
- this project: ``GET``/``PUT /state/task-instances/{id}/value?key=...`` with a credential for
  that task instance, signed as the API server signs them after a handshake.

A third side is the floor (``_floor.py``): a minimal ASGI app on uvicorn that runs one primary-key
select or upsert per request on this project's database, with no authentication and no check; the
clients send it the same GETs and PUTs.

The clients are one asyncio loop in this process speaking HTTP/1.1 on raw sockets: much cheaper
than an HTTP library, so that on a small machine the load generator takes little of the CPU the
server needs. Each point reports requests/s, latency p50/p99 and mean, errors (anything but a 2xx
answer, and failed connections), the server's CPU time per request (its processes' user and system
time over the point, divided by the requests answered), and what the database saw meanwhile: new
connections per second (``pg_stat_database.sessions``) and transactions per second; and the
latency p50/p99 and mean of GETs and PUTs apart.

With ``--gc-probe``, the api-server processes load a probe (a ``sitecustomize`` on their
``PYTHONPATH``) that times every garbage collection, and the pauses are reported; with
``--gc-freeze`` the probe also freezes or unfreezes the heap on request, and every point is also
measured with the heap the server had after start-up frozen (``gc.collect(); gc.freeze()``).

``--pause-others`` stops (SIGSTOP) the other sides' deployments during each point, so that the
measured side shares the cores only with its own deployment (the floor, with this project's, whose
database it uses): what the other deployment's scheduler, dag-processor and tasks add to a tail.

``--ours-env NAME=VALUE`` adds a variant of this project's side per value (one deployment each),
e.g. ``--ours-env AIRFLOW__STATE__DATABASE_POOL_SIZE=5 AIRFLOW__STATE__DATABASE_POOL_SIZE=40``.

    PYTHONPATH=dev uv run --no-sync python bench/bench_load.py [--tis 20] [--clients 20 100] \\
        [--seconds 20] [--rounds 2] [--gc-probe] [--gc-freeze] [--pause-others] \\
        [--ours-env NAME=VALUE ...]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import psutil
from _common import parse_args
from _deployments import Side, airflow33_program, airflow33_python, dags_folder, side, wait_for_dags
from _floor import floor_app
from state_testing.dbservers import free_port

DAG_ID = "bench_load_holders"
AIRFLOW33, OURS, FLOOR = "airflow 3.3.2", "this project", "the floor"
KEYS_PER_CLIENT = 10

# Task instances that stay running while the clients speak for them; bounded in time either way.
HOLDERS_DAG = """
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, task

RELEASE = Path(__file__).parent / "release"


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_tasks={tis})
def {dag_id}():
    @task
    def hold(index):
        deadline = time.monotonic() + {hold}
        while time.monotonic() < deadline and not RELEASE.exists():
            time.sleep(1)

    hold.expand(index=list(range({tis})))


{dag_id}()
"""

# Mints each task instance's execution token as Airflow 3.3.2 does (the scheduler's workload token
# is exchanged for one of these at the start of the task; the Execution API's routes take this
# kind), with the deployment's configuration; prints them with the API version its client sends.
MINT_33 = """
import json, sys
from airflow.api_fastapi.auth.tokens import JWTGenerator, get_signing_args
from airflow.configuration import conf
from airflow.sdk.api.datamodels._generated import API_VERSION

generator = JWTGenerator(
    valid_for=3600,
    audience=conf.get_mandatory_list_value("execution_api", "jwt_audience")[0],
    issuer=conf.get("api_auth", "jwt_issuer", fallback=None),
    **get_signing_args(make_secret_key_if_needed=False),
)
tokens = {ti: generator.generate(extras={"sub": ti, "scope": "execution"}) for ti in sys.argv[1:]}
print(json.dumps({"api_version": API_VERSION, "tokens": tokens}))
"""

# Loaded by every process of a deployment run with --gc-probe, active in the api-server only: times
# each collection (gc.callbacks) and obeys command files the benchmark drops into its directory.
GC_PROBE = """
import os
import sys

_directory = os.environ.get("STATE_BENCH_GC_PROBE")
if _directory and "api-server" in sys.argv[1:2]:
    import gc
    import json
    import threading
    import time

    _pauses = []
    _started = [0.0]

    def _timed(phase, info):
        if phase == "start":
            _started[0] = time.perf_counter()
        else:
            _pauses.append((info["generation"], time.perf_counter() - _started[0]))

    gc.callbacks.append(_timed)

    def _obey():
        while True:
            time.sleep(0.1)
            for name in sorted(os.listdir(_directory)):
                if not name.endswith(".cmd"):
                    continue
                path = os.path.join(_directory, name)
                with open(path) as file:
                    command = file.read().split()
                os.unlink(path)
                if command[0] == "freeze":
                    gc.collect()
                    gc.freeze()
                elif command[0] == "unfreeze":
                    gc.unfreeze()
                elif command[0] == "reset":
                    _pauses.clear()
                elif command[0] == "dump":
                    found = list(_pauses)
                    _pauses.clear()
                    report = {"pauses": found, "frozen": gc.get_freeze_count()}
                    with open(command[1] + ".tmp", "w") as file:
                        json.dump(report, file)
                    os.replace(command[1] + ".tmp", command[1])

    threading.Thread(target=_obey, name="state-bench-gc-probe", daemon=True).start()
"""


@dataclass
class Target:
    """One side as the clients see it: where to connect and what each client sends."""

    name: str
    side: Side
    host: str
    port: int
    # Per task instance: a function of (key, value or None) -> request bytes.
    requests: list[object]
    # The server's process (its children too): the API server, or the floor app.
    server_pid: int
    gc_probe: Path | None = None
    results: dict[tuple[int, str], list[Point]] = field(default_factory=dict)


@dataclass
class Point:
    seconds: float
    latencies: list[float]
    # The same latencies, by method: "GET" and "PUT".
    by_method: dict[str, list[float]]
    errors: int
    statuses: dict[int, int]
    sessions_per_s: float
    xacts_per_s: float
    gc: dict | None
    cpu_ms_per_request: float

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def mean_ms(self) -> float:
        return self.mean_of(None)

    def mean_of(self, method: str | None) -> float:
        """The mean latency (ms) of *method*'s requests, or of all (None)."""
        found = self.latencies if method is None else self.by_method[method]
        return statistics.mean(found) * 1000 if found else float("nan")

    def percentile(self, fraction: float, method: str | None = None) -> float:
        ordered = sorted(self.latencies if method is None else self.by_method[method])
        return (
            ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000 if ordered else float("nan")
        )


def main() -> None:
    parser = parse_args(__doc__, ops=0)
    parser.add_argument("--tis", type=int, default=20, help="running task instances per side")
    parser.add_argument("--clients", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each point")
    parser.add_argument("--hold", type=float, default=1800.0, help="the longest the task instances run")
    parser.add_argument("--gc-probe", action="store_true", help="time the api-servers' GC pauses")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="each point also with gc.freeze() (implies --gc-probe)"
    )
    parser.add_argument("--ours-env", nargs="+", default=[], metavar="NAME=VALUE", help="variants of ours")
    parser.add_argument("--no-airflow33", action="store_true", help="this project's variants only")
    parser.add_argument(
        "--pause-others",
        action="store_true",
        help="stop (SIGSTOP) the other sides' deployments during each point, so that only the measured "
        "side's deployment shares the cores with the clients",
    )
    parser.set_defaults(rounds=2)
    args = parser.parse_args()
    args.gc_probe = args.gc_probe or args.gc_freeze

    probe_root = Path(tempfile.mkdtemp(prefix="state-bench-gc-"))
    (probe_root / "sitecustomize.py").write_text(GC_PROBE)
    variants: list[tuple[str, dict[str, str]]] = [(OURS, {})]
    if args.ours_env:
        variants = [
            (f"ours {setting.split('__')[-1].lower()}", dict([setting.split("=", 1)]))
            for setting in args.ours_env
        ]
    holders = {"tis": args.tis, "hold": args.hold, "dag_id": DAG_ID}
    # Each deployment may run all holders at once (the harness allows 4 task processes).
    capacity = {
        "AIRFLOW__CORE__PARALLELISM": str(args.tis + 2),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(args.tis),
    }
    with (
        dags_folder({f"{DAG_ID}.py": HOLDERS_DAG.format(**holders)}) as dags,
        contextlib.ExitStack() as stack,
    ):
        stack.callback((dags / "release").write_text, "")
        specs = [] if args.no_airflow33 else [(AIRFLOW33, airflow33_program(), {})]
        specs += [(name, None, env) for name, env in variants]
        targets = []
        for name, program, env in specs:
            probe = None
            if args.gc_probe:
                probe = probe_root / name.replace(" ", "-")
                probe.mkdir()
                env = {**env, "PYTHONPATH": str(probe_root), "STATE_BENCH_GC_PROBE": str(probe)}
            kwargs = {"airflow": program} if program else {}
            each = stack.enter_context(side(name, dags, extra_env={**capacity, **env}, **kwargs))
            targets.append((each, probe))
        wait_for_dags([each for each, _ in targets], [DAG_ID])
        for each, _ in targets:
            each.deployment.trigger(DAG_ID, "load")
        running = {
            each.name: each.running_task_instances(DAG_ID, "load", args.tis, timeout=120 + 10 * args.tis)
            for each, _ in targets
        }
        print(f"{args.tis} task instances running on each side", flush=True)
        prepared = [prepare(each, probe, running[each.name]) for each, probe in targets]
        ours = next(target for target in prepared if target.name != AIRFLOW33)
        floor_port = free_port()
        floor = stack.enter_context(floor_app(ours.side.deployment.sql_alchemy_conn, floor_port))
        prepared.append(
            Target(
                FLOOR,
                ours.side,
                "127.0.0.1",
                floor_port,
                [_get_and_put("127.0.0.1", floor_port, "", lambda key: f"/value?key={quote(key, safe='')}")],
                floor.pid,
            )
        )
        gc_modes = ["default", "frozen"] if args.gc_freeze else ["default"]
        for clients in args.clients:
            for round_ in range(args.rounds):
                order = prepared if round_ % 2 == 0 else prepared[::-1]
                for target in order:
                    for mode in gc_modes if round_ % 2 == 0 else gc_modes[::-1]:
                        with contextlib.ExitStack() as others:
                            if args.pause_others:
                                for each, _ in targets:
                                    if each is not target.side:
                                        others.enter_context(each.deployment.paused())
                            point = run_point(target, clients, mode, args)
                        target.results.setdefault((clients, mode), []).append(point)
                        print(
                            f"  {target.name:<36} {clients:>4} clients gc {mode:<8} {point.rps:7.0f} req/s "
                            f"p50 {point.percentile(0.5):7.1f} ms p99 {point.percentile(0.99):7.1f} ms "
                            f"errors {point.errors}",
                            flush=True,
                        )
        for each, _ in targets:
            each.deployment.check_alive()
    report(prepared, args, gc_modes)


def prepare(each: Side, probe: Path | None, tis: list[dict]) -> Target:
    url = urlsplit(each.deployment.api_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    if each.name == AIRFLOW33:
        minted = json.loads(airflow33_python(MINT_33, each.deployment.env, *(str(ti["id"]) for ti in tis)))
        requests = [
            airflow33_requests(
                host, port, str(ti["id"]), minted["tokens"][str(ti["id"])], minted["api_version"]
            )
            for ti in tis
        ]
    else:
        requests = [ours_requests(each, host, port, ti) for ti in tis]
    return Target(each.name, each, host, port, requests, each.deployment.processes["api-server"].pid, probe)


def airflow33_requests(host: str, port: int, ti_id: str, token: str, api_version: str):
    return _get_and_put(
        host,
        port,
        f"Authorization: Bearer {token}\r\nAirflow-API-Version: {api_version}\r\n",
        lambda key: f"/execution/store/ti/{ti_id}/{quote(key, safe='')}",
    )


def ours_requests(each: Side, host: str, port: int, ti: dict):
    return _get_and_put(
        host,
        port,
        f"Authorization: Bearer {our_credential(each, ti)}\r\n",
        lambda key: f"/state/task-instances/{ti['id']}/value?key={quote(key, safe='')}",
    )


def _get_and_put(host: str, port: int, auth_headers: str, path_of):
    """Raw HTTP/1.1 requests of one side: a GET of a key (value None) or a PUT of a value."""
    headers = f"Host: {host}:{port}\r\n{auth_headers}"

    def request(key: str, value: int | None) -> bytes:
        path = path_of(key)
        if value is None:
            return f"GET {path} HTTP/1.1\r\n{headers}\r\n".encode()
        body = json.dumps({"value": value})
        return (
            f"PUT {path} HTTP/1.1\r\n{headers}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()

    return request


def our_credential(each: Side, ti: dict) -> str:
    """A credential for *ti*, signed as this side's API server signs them after a handshake."""
    # Importing Airflow needs a home: the deployment's (nothing here reads its database).
    os.environ.setdefault("AIRFLOW_HOME", each.deployment.env["AIRFLOW_HOME"])
    from state_testing.credentials import credential_for

    return credential_for(each.deployment.env, ti)


def run_point(target: Target, clients: int, gc_mode: str, args) -> Point:
    if args.gc_freeze and target.gc_probe is not None:
        probe_command(target.gc_probe, "freeze" if gc_mode == "frozen" else "unfreeze")
    # Credentials live ten minutes: fresh ones for every point of this project's side.
    if target.name not in (AIRFLOW33, FLOOR):
        running = target.side.running_task_instances(DAG_ID, "load", args.tis, timeout=60)
        target.requests = [ours_requests(target.side, target.host, target.port, ti) for ti in running]
    result = asyncio.run(load(target, clients, args.warmup, args.seconds))
    return Point(**result)


def probe_command(directory: Path, *command: str) -> None:
    name = directory / f"{time.monotonic_ns()}.cmd"
    name.with_suffix(".tmp").write_text(" ".join(command))
    name.with_suffix(".tmp").rename(name)
    deadline = time.monotonic() + 10
    while name.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the api-server's GC probe did not answer {command}")
        time.sleep(0.05)


def probe_dump(directory: Path) -> dict:
    out = directory / f"dump-{time.monotonic_ns()}.json"
    probe_command(directory, "dump", str(out))
    deadline = time.monotonic() + 10
    while not out.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the api-server's GC probe wrote no dump")
        time.sleep(0.05)
    return json.loads(out.read_text())


def server_cpu_seconds(pid: int) -> float:
    """User and system time of process *pid* and its children (uvicorn's workers) so far."""
    process = psutil.Process(pid)
    return sum(sum(each.cpu_times()[:2]) for each in (process, *process.children(recursive=True)))


def database_counters(each: Side) -> tuple[float, int, int]:
    row = each.deployment.query(
        "SELECT sessions, xact_commit + xact_rollback AS xacts FROM pg_stat_database"
        " WHERE datname = current_database()"
    )[0]
    return time.monotonic(), int(row["sessions"]), int(row["xacts"])


async def load(target: Target, clients: int, warmup: float, seconds: float) -> dict:
    start = time.monotonic()
    measure_from, measure_to = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    by_method: dict[str, list[float]] = {"GET": [], "PUT": []}
    statuses: dict[int, int] = {}
    errors = [0]
    counters: dict[str, tuple[float, int, int]] = {}
    cpu: dict[str, float] = {}
    answered = [0]  # every answer within the measured window, errors included
    gc: dict = {}

    async def client(index: int) -> None:
        request = target.requests[index % len(target.requests)]
        keys = [f"client-{index}-key-{k}" for k in range(KEYS_PER_CLIENT)]
        # Every key is written first (in the warm-up), so that no GET asks for an absent key.
        cycle = [request(key, index) for key in keys]
        cycle += [request(key, value) for key in keys for value in (None, index)]
        sent = 0
        connection = None
        while time.monotonic() < measure_to:
            try:
                if connection is None:
                    connection = await asyncio.open_connection(target.host, target.port)
                reader, writer = connection
                began = time.monotonic()
                # The keys' first writes, then a GET and a PUT of each key in turn.
                at = sent if sent < len(cycle) else KEYS_PER_CLIENT + sent % (2 * KEYS_PER_CLIENT)
                sending = cycle[at]
                writer.write(sending)
                status, keep_alive = await read_response(reader)
                done = time.monotonic()
                sent += 1
                if not keep_alive:
                    writer.close()
                    connection = None
            except (OSError, asyncio.IncompleteReadError, ValueError):
                done = time.monotonic()
                connection = None
                if measure_from <= done < measure_to:
                    errors[0] += 1
                await asyncio.sleep(0.05)
                continue
            if measure_from <= done < measure_to:
                answered[0] += 1
            if measure_from <= began and done < measure_to:
                statuses[status] = statuses.get(status, 0) + 1
                if 200 <= status < 300:
                    latencies.append(done - began)
                    by_method[sending[:3].decode()].append(done - began)
                else:
                    errors[0] += 1
        if connection is not None:
            connection[1].close()

    async def sample_counters() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
        if target.gc_probe is not None:
            await asyncio.to_thread(probe_command, target.gc_probe, "reset")
        counters["from"] = await asyncio.to_thread(database_counters, target.side)
        cpu["from"] = server_cpu_seconds(target.server_pid)
        await asyncio.sleep(max(0.0, measure_to - time.monotonic()))
        cpu["to"] = server_cpu_seconds(target.server_pid)
        counters["to"] = await asyncio.to_thread(database_counters, target.side)
        if target.gc_probe is not None:
            gc.update(await asyncio.to_thread(probe_dump, target.gc_probe))

    await asyncio.gather(sample_counters(), *(client(i) for i in range(clients)))
    (t0, sessions0, xacts0), (t1, sessions1, xacts1) = counters["from"], counters["to"]
    return {
        "seconds": seconds,
        "latencies": latencies,
        "by_method": by_method,
        "errors": errors[0],
        "statuses": statuses,
        "sessions_per_s": (sessions1 - sessions0) / (t1 - t0),
        "xacts_per_s": (xacts1 - xacts0) / (t1 - t0),
        "gc": gc or None,
        "cpu_ms_per_request": (cpu["to"] - cpu["from"]) * 1000 / max(answered[0], 1),
    }


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one HTTP/1.1 response; return its status and whether the connection stays open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip().lower()
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    return status, headers.get("connection") != "close"


def report(targets: list[Target], args, gc_modes: list[str]) -> None:
    print(
        f"\nLoad at the API server: {args.tis} running task instances per side, alternate GET/PUT per "
        f"client,\n{args.seconds:g} s per point after {args.warmup:g} s warm-up, medians of {args.rounds} "
        "points (each point's own p50/p99)"
    )
    print(
        f"{'side':<36}{'clients':>8}{'gc':>8}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'mean ms':>8}"
        f"{'errors':>7}{'cpu ms':>8}{'conn/s':>8}{'xact/s':>8}{'gc max ms':>10}{'gc>100ms':>9}{'in gc':>9}"
    )
    baseline = next((t for t in targets if t.name == AIRFLOW33), None)
    for clients in args.clients:
        for mode in gc_modes:
            for target in targets:
                points = target.results[(clients, mode)]
                pauses = [p for point in points if point.gc for p in point.gc["pauses"]]
                long_pauses = sum(1 for _, seconds in pauses if seconds > 0.1) / len(points) if pauses else 0
                gc_max = f"{max(s for _, s in pauses) * 1000:10.0f}" if pauses else f"{'-':>10}"
                in_gc = sum(s for _, s in pauses) / sum(p.seconds for p in points)
                gc_share = f"{in_gc:9.1%}" if pauses else ""
                print(
                    f"{target.name:<36}{clients:>8}{mode:>8}{median(points, 'rps'):>8.0f}"
                    f"{statistics.median(p.percentile(0.5) for p in points):>8.1f}"
                    f"{statistics.median(p.percentile(0.99) for p in points):>8.1f}"
                    f"{median(points, 'mean_ms'):>8.1f}{sum(p.errors for p in points):>7}"
                    f"{median(points, 'cpu_ms_per_request'):>8.2f}{median(points, 'sessions_per_s'):>8.1f}"
                    f"{median(points, 'xacts_per_s'):>8.0f}{gc_max}{long_pauses:>9.1f}{gc_share}"
                )
    print("\nBy method: p50 / p99 / mean ms (medians of the points)")
    for clients in args.clients:
        for mode in gc_modes:
            for target in targets:
                points = target.results[(clients, mode)]
                cells = []
                for method in ("GET", "PUT"):
                    p50, p99 = (
                        statistics.median(p.percentile(fraction, method) for p in points)
                        for fraction in (0.5, 0.99)
                    )
                    mean = statistics.median(p.mean_of(method) for p in points)
                    cells.append(f"{method} {p50:6.1f} / {p99:6.1f} / {mean:6.1f}")
                print(f"{target.name:<36}{clients:>8}{mode:>8}   " + "   ".join(cells))
    if baseline is None:
        return
    floor = next(t for t in targets if t.name == FLOOR)
    print("\nRatios (same clients, same GC mode): to Airflow 3.3.2, to the floor, p99 to the mean latency")
    print(
        f"{'side':<36}{'clients':>8}{'gc':>8}{'req/s x':>9}{'p99 x':>8}{'cpu/req x floor':>17}"
        f"{'p99/mean':>10}"
    )
    goals = []
    for clients in args.clients:
        for mode in gc_modes:
            theirs, floors = baseline.results[(clients, mode)], floor.results[(clients, mode)]
            for target in targets:
                if target is baseline or target is floor:
                    continue
                ours = target.results[(clients, mode)]
                rps = median(ours, "rps") / median(theirs, "rps")
                p99 = statistics.median(p.percentile(0.99) for p in ours)
                cpu = median(ours, "cpu_ms_per_request") / median(floors, "cpu_ms_per_request")
                tail = p99 / median(ours, "mean_ms")
                theirs_p99 = statistics.median(p.percentile(0.99) for p in theirs)
                print(
                    f"{target.name:<36}{clients:>8}{mode:>8}{rps:>9.2f}{p99 / theirs_p99:>8.2f}"
                    f"{cpu:>17.2f}{tail:>10.2f}"
                )
                goals += [
                    (f"{target.name}, {clients} clients: throughput >= 5x 3.3.2's", rps, rps >= 5),
                    (f"{target.name}, {clients} clients: CPU per request <= 2x the floor's", cpu, cpu <= 2),
                    (f"{target.name}, {clients} clients: p99 <= 2x the mean latency", tail, tail <= 2),
                ]
    print("\nGoals (issue 33)")
    for what, ratio, met in goals:
        print(f"  {what}: {ratio:.2f}x  {'met' if met else 'NOT met'}")


def median(points: list[Point], attribute: str) -> float:
    return statistics.median(getattr(point, attribute) for point in points)


if __name__ == "__main__":
    main()
