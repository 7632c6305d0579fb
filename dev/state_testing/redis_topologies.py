"""
Throw-away Redis Cluster and Sentinel set-ups on loopback, for the tests of the Redis backend.

* :func:`redis_cluster`: 3 primaries and 3 replicas (``redis-cli --cluster create``), with a short
  ``cluster-node-timeout`` so a killed primary is replaced in a few seconds.
* :func:`redis_sentinel`: one primary, its replicas and three sentinels with a short
  ``down-after-milliseconds``.

Each yields a handle once the set-up is healthy (every slot served, every replica in sync, every
sentinel aware of the others) and stops every process when the block ends, also on failure. Every
server runs in its own process group and writes to a log file in a temporary directory, which the
start-up error quotes. Nothing is persisted: the data dies with the processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state_testing.dbservers import REDIS_SERVER

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
SENTINEL_SERVICE = "statemaster"
#: How long a cluster node or a sentinel waits before it calls a silent primary dead.
NODE_TIMEOUT_MS = 1000
_START_TIMEOUT_S = 30.0


def have_redis_topologies() -> bool:
    return os.path.exists(REDIS_SERVER) and os.path.exists(REDIS_CLI)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports(count: int, *, with_bus: bool = False) -> list[int]:
    """*count* distinct free ports; with *with_bus* also port + 10000 (the cluster bus) is free."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in found or (with_bus and (port > 55535 or not _port_free(port + 10000))):
            continue
        found.append(port)
    return found


@dataclass
class RedisProcess:
    """One redis-server (or sentinel) in its own process group."""

    port: int
    workdir: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "redis.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # Output to a file, not a pipe nobody drains; a new session = its own process group.
            self.process = subprocess.Popen(
                [REDIS_SERVER, *self.args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server's whole process group (no clean shutdown: a crash)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-2000:]
        return ""

    def client(self, **kwargs):  # -> redis.Redis; redis is imported lazily, as in dbservers
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, **kwargs)


def _server_args(port: int, workdir: Path) -> list[str]:
    return [
        "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
        "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "notice",
    ]  # fmt: skip


def _wait_until(what: str, check: Callable[[], bool], processes: list[RedisProcess]) -> None:
    import redis

    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        dead = [p for p in processes if p.process is not None and not p.running()]
        if dead:
            raise RuntimeError(f"redis-server on port {dead[0].port} exited:\n{dead[0].log()}")
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            if check():
                return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- port {p.port}:\n{p.log()}" for p in processes)
            raise TimeoutError(f"Redis set-up not healthy after {_START_TIMEOUT_S}s: {what}\n{logs}")
        time.sleep(0.1)


def _info(process: RedisProcess, section: str) -> dict[str, object]:
    client = process.client()
    try:
        return client.info(section)
    finally:
        client.close()


# --- cluster ------------------------------------------------------------------------------------


@dataclass
class ClusterHandle:
    """A running cluster: its nodes, and a seed URL for clients."""

    nodes: list[RedisProcess]
    url: str = ""

    def node_at(self, address: str) -> RedisProcess:
        return next(node for node in self.nodes if node.address == address)

    def primary_of(self, key: str) -> RedisProcess:
        """The node that now serves *key*'s slot as primary (asked of a live node)."""
        live = next(node for node in self.nodes if node.running())
        client = live.client()
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    host, port = primary[0], primary[1]
                    return self.node_at(f"{_text(host)}:{int(port)}")
        finally:
            client.close()
        raise LookupError(f"no node serves the slot of {key!r}")

    def wait_healthy(self, *, expect_replicas: bool = True) -> None:
        """Every live node sees every slot served; with *expect_replicas*, every primary has one."""
        live = [node for node in self.nodes if node.running()]

        def healthy() -> bool:
            for node in live:
                info = node.client().execute_command("CLUSTER", "INFO")
                text = _text(info)
                if "cluster_state:ok" not in text or "cluster_slots_ok:16384" not in text:
                    return False
            if not expect_replicas:
                return True
            for node in live:
                replication = _info(node, "replication")
                if replication.get("role") == "master" and int(replication.get("connected_slaves", 0)) < 1:
                    return False
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
            return True

        _wait_until("cluster state ok with a replica per primary", healthy, live)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def redis_cluster(primaries: int = 3, replicas_per_primary: int = 1) -> Iterator[ClusterHandle]:
    """Start a Redis Cluster on loopback; yield its handle once every slot is served and in sync."""
    base = Path(tempfile.mkdtemp(prefix="state-redis-cluster-"))
    ports = _free_ports(primaries * (1 + replicas_per_primary), with_bus=True)
    nodes = []
    for port in ports:
        workdir = base / str(port)
        args = [
            *_server_args(port, workdir),
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(workdir / "nodes.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            # A replica may always take over, however long it was cut off (fast tests, no flakes).
            "--cluster-replica-validity-factor", "0",
        ]  # fmt: skip
        nodes.append(RedisProcess(port, workdir, args))
    handle = ClusterHandle(nodes, url=nodes[0].url)
    try:
        for node in nodes:
            node.start()
        _wait_until("every node answers PING", lambda: all(n.client().ping() for n in nodes), nodes)
        created = subprocess.run(
            [
                *(REDIS_CLI, "--cluster", "create"),
                *(n.address for n in nodes),
                *("--cluster-replicas", str(replicas_per_primary), "--cluster-yes"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}")
        handle.wait_healthy(expect_replicas=replicas_per_primary > 0)
        yield handle
    finally:
        for node in nodes:
            node.kill()
        shutil.rmtree(base, ignore_errors=True)


# --- sentinel -----------------------------------------------------------------------------------


@dataclass
class SentinelHandle:
    """A running primary, its replicas and sentinels."""

    servers: list[RedisProcess]
    sentinels: list[RedisProcess]
    service: str = SENTINEL_SERVICE
    password: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def sentinel_addresses(self) -> str:
        """The ``[state_redis] sentinels`` value: ``host:port,host:port,...``."""
        return ",".join(s.address for s in self.sentinels)

    def primary(self) -> RedisProcess:
        """The server the sentinels now name as primary."""
        for sentinel in self.sentinels:
            if not sentinel.running():
                continue
            client = sentinel.client()
            try:
                _host, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            finally:
                client.close()
            return next(s for s in self.servers if s.port == int(port))
        raise LookupError("no sentinel is running")

    def replicas_follow(self, primary: RedisProcess) -> bool:
        """Whether every running server but *primary* replicates from it, with its link up."""
        for server in self.servers:
            if server is primary or not server.running():
                continue
            client = server.client(password=self.password)
            try:
                replication = client.info("replication")
            finally:
                client.close()
            if (
                replication.get("master_port") != primary.port
                or replication.get("master_link_status") != "up"
            ):
                return False
        return True


@contextlib.contextmanager
def redis_sentinel(replicas: int = 1, password: str | None = None) -> Iterator[SentinelHandle]:
    """
    Start a primary, *replicas* replicas and three sentinels; yield once the sentinels know them all.

    With *password* every data node requires it (``requirepass``/``masterauth``); the sentinels
    themselves are open.
    """
    base = Path(tempfile.mkdtemp(prefix="state-redis-sentinel-"))
    ports = _free_ports(1 + replicas + 3)
    auth = ["--requirepass", password, "--masterauth", password] if password else []
    primary_port = ports[0]
    servers = []
    for i, port in enumerate(ports[: 1 + replicas]):
        args = _server_args(port, base / str(port)) + auth
        if i:
            args += ["--replicaof", "127.0.0.1", str(primary_port)]
        servers.append(RedisProcess(port, base / str(port), args))
    sentinels = []
    for port in ports[1 + replicas :]:
        workdir = base / f"sentinel-{port}"
        workdir.mkdir(parents=True)
        conf = workdir / "sentinel.conf"  # a file: sentinels rewrite their configuration
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {workdir}",
            f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {NODE_TIMEOUT_MS}",
            f"sentinel failover-timeout {SENTINEL_SERVICE} 3000",
            f"sentinel parallel-syncs {SENTINEL_SERVICE} 1",
        ]
        if password:
            lines.append(f"sentinel auth-pass {SENTINEL_SERVICE} {password}")
        conf.write_text("\n".join(lines) + "\n")
        sentinels.append(RedisProcess(port, workdir, [str(conf), "--sentinel"]))
    handle = SentinelHandle(servers, sentinels, password=password)
    everything = servers + sentinels
    try:
        for process in everything:
            process.start()

        def healthy() -> bool:
            for server in servers[1:]:
                client = server.client(password=password)
                try:
                    if client.info("replication").get("master_link_status") != "up":
                        return False
                finally:
                    client.close()
            for sentinel in sentinels:
                client = sentinel.client()
                try:
                    state = client.sentinel_master(SENTINEL_SERVICE)
                finally:
                    client.close()
                if state.get("num-other-sentinels", 0) < len(sentinels) - 1:
                    return False
                if state.get("num-slaves", 0) < replicas or "s_down" in str(state.get("flags", "")):
                    return False
            return True

        _wait_until("replicas in sync and every sentinel knowing the others", healthy, everything)
        yield handle
    finally:
        for process in everything:
            process.kill()
        shutil.rmtree(base, ignore_errors=True)


# --- a stream of writes, for failover tests -----------------------------------------------------

_STREAM_KEYS = 5


@dataclass
class WriteStream:
    """Writes increasing values (``write``, and every fourth call a ``set_many``) until stopped."""

    backend: Any  # a RedisStateBackend
    scope: Any
    acknowledged: dict[str, int] = field(default_factory=dict)
    #: (started, ended, error or None) per call, in order
    calls: list[tuple[float, float, BaseException | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            started = time.monotonic()
            try:
                if n % 4:
                    key = f"k{n % _STREAM_KEYS}"
                    self.backend.write(self.scope, key, str(n))
                    done = {key: n}
                else:
                    done = {f"batch{i}": n for i in range(2)}
                    self.backend.set_many(self.scope, {key: str(n) for key in done})
            except Exception as error:
                self.calls.append((started, time.monotonic(), error))
            else:
                self.acknowledged.update(done)
                self.calls.append((started, time.monotonic(), None))
            time.sleep(0.002)

    def timeline(self, origin: float) -> str:
        """The refused calls and the last call's end, timed from *origin* (for a failure message)."""
        calls = list(self.calls)
        if not calls:
            return "  no call ended"
        refused = [
            f"  +{started - origin:.2f}s..+{ended - origin:.2f}s {error!r}"
            for started, ended, error in calls
            if error is not None
        ]
        last = f"  last call ended at +{calls[-1][1] - origin:.2f}s, now +{time.monotonic() - origin:.2f}s"
        return "\n".join([*refused, last])

    def successes_after(self, moment: float) -> int:
        return sum(1 for started, _, error in self.calls if started > moment and error is None)

    def errors(self) -> list[BaseException]:
        return [error for _, _, error in self.calls if error is not None]

    def missing(self) -> dict[str, tuple[int, str | None]]:
        """Acknowledged writes not readable now (a later value is fine: a failed call may have
        been applied, and values only grow)."""
        stored = self.backend.get_many(self.scope, list(self.acknowledged))
        return {
            key: (value, stored.get(key))
            for key, value in self.acknowledged.items()
            if key not in stored or int(stored[key]) < value
        }


def wait_for(condition, timeout: float, what: str, explain=None) -> None:
    """Poll *condition* until true; past *timeout*, fail with *what* and ``explain()`` if given."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"not within {timeout}s: {what}{detail}")
        time.sleep(0.05)
