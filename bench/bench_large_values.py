"""
Large values: what task code pays to write and read a checkpoint file through ``[state]
object_storage_path``, against copying the same bytes to the same storage with fsspec; and what a
small value pays for the feature. Side by side in one run, alternating rounds.

Sides, per storage (``file://`` on local disk; ``--s3``: also moto's S3 server, through an Airflow
connection as a deployment reaches S3):

- ``write``: ``task_state.set_file(key, path)``'s upload (``worker.large.store_file``: the
  filesystem's ``put_file``, the file's BLAKE3 computed in a thread beside it) vs
  ``fs.put_file(path, remote)``;
- ``read``: ``task_state.get_file(key, path)``'s download (``worker.large.read_file``: the
  filesystem's ``get_file`` beside the path, renamed once checked; a local object hashed where it
  lies while the kernel copies it, a remote one's download hashed once complete) vs
  ``fs.get_file(remote, path)``. Each read goes to a path that does not exist yet, as a task
  restoring a checkpoint does.

Before every timed operation, untimed, ``os.sync()`` writes out the dirty pages the previous one
left, so that no side pays for the other's writeback.

The one small HTTP request set_file/get_file add for the reference is left out: milliseconds
against seconds. Each row shows seconds (median, mean, p99 of the rounds), the ratio of speeds
(fsspec time / ours: the target is >= 0.9), and the most the process's resident memory grew during
each side (ours adds a few 8 MiB chunks to what the filesystem's own client holds), and the CPU
seconds of each side (all threads: ours hashes on a second core, so its ratio holds when one is free).

Then the small value's path: ``worker.large.encode`` and ``worker.large.load`` (what set() and
get() now call) vs ``codec.encode`` and nothing, on a 100-byte value, in ns per call.

    PYTHONPATH=dev flock /tmp/bench.lock uv run --no-sync python bench/bench_large_values.py \
        [--size-mib 1024] [--rounds 5] [--s3] [--s3-size-mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

MIB = 1024 * 1024


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """The most resident memory grew above its level at the start, sampled every 5 ms."""

    def __enter__(self) -> PeakMemory:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def grown(self) -> int:
        return self.peak - self.start


def timed(operation: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of this process (all its threads, user and system)."""
    start, cpu = time.perf_counter(), time.process_time()
    operation()
    return time.perf_counter() - start, time.process_time() - cpu


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def compare(storage: str, source: Path, scratch: Path, rounds: int) -> None:
    """Rounds alternating fsspec and ours, for write then read; one row each."""
    from airflow_task_state import large_values
    from airflow_task_state import object_storage as objects
    from airflow_task_state.worker import large

    root = objects.base()
    fs = root.fs
    copies: list[str] = []
    references: list[large_values.Reference] = []

    def fsspec_write() -> None:
        remote = root / f"fsspec-{len(copies)}"
        fs.put_file(str(source), remote.path)
        copies.append(remote.path)

    def our_write() -> None:
        references.append(large_values.parse(json.loads(large.store_file(source))))

    # Each read to a path that does not exist yet, as a task restoring a checkpoint does; the last
    # one removed untimed. (Replacing an existing file by rename makes ext4 flush the new file to
    # disk first, auto_da_alloc: seconds for 1 GiB, which a bench overwriting one path would time.)
    reads = {"fsspec": 0, "ours": 0}

    def fresh_target(side: str) -> Path:
        previous = scratch / f"{side}-{reads[side]}.bin"
        previous.unlink(missing_ok=True)
        reads[side] += 1
        return scratch / f"{side}-{reads[side]}.bin"

    def fsspec_read() -> None:
        fs.get_file(copies[-1], str(targets["fsspec"]))

    def our_read() -> None:
        large.read_file(references[-1], targets["ours"])

    targets = {"fsspec": fresh_target("fsspec"), "ours": fresh_target("ours")}

    size = source.stat().st_size
    print(f"\n{storage}: {size // MIB} MiB, {rounds} rounds")
    print(
        f"{'op':<7}{'side':<8}{'median s':>10}{'mean s':>9}{'p99 s':>8}{'MiB/s':>8}{'memory +MiB':>13}"
        f"{'CPU s':>8}"
    )
    for op, theirs, ours in (("write", fsspec_write, our_write), ("read", fsspec_read, our_read)):
        times: dict[str, list[float]] = {"fsspec": [], "ours": []}
        grown = {"fsspec": 0, "ours": 0}
        cpus: dict[str, list[float]] = {"fsspec": [], "ours": []}
        theirs(), ours()  # warm: connections, the first listing
        targets = {side: fresh_target(side) for side in targets}
        for _ in range(rounds):
            for side, operation in (("fsspec", theirs), ("ours", ours)):
                targets[side] = fresh_target(side)  # untimed: the previous read's file removed
                # Untimed: the previous operation's dirty pages written out, so that no side pays
                # for the other's writeback (1 GiB at the disk's few hundred MB/s takes seconds).
                os.sync()
                with PeakMemory() as memory:
                    wall, cpu = timed(operation)
                times[side].append(wall)
                cpus[side].append(cpu)
                grown[side] = max(grown[side], memory.grown)
        for side, values in times.items():
            median = statistics.median(values)
            shown = f"{grown[side] / MIB:>13.1f}{statistics.median(cpus[side]):>8.2f}"
            print(
                f"{op:<7}{side:<8}{median:>10.3f}{statistics.mean(values):>9.3f}{p99(values):>8.3f}"
                f"{size / MIB / median:>8.0f}{shown}"
            )
        ratio = statistics.median(times["fsspec"]) / statistics.median(times["ours"])
        mean_ratio = statistics.mean(times["fsspec"]) / statistics.mean(times["ours"])
        print(f"{op:<7}ratio fsspec/ours: median {ratio:.2f}, mean {mean_ratio:.2f} (target >= 0.9)")
    for path in copies:
        fs.rm_file(path)
    for reference in references:
        objects.remove(reference.path)


def small_values(ops: int, rounds: int) -> None:
    """What set() and get() pay for the feature on a small value, in ns per call, side by side."""
    from airflow_task_state import codec
    from airflow_task_state.worker import large

    value = {"job_id": "app_0001", "offsets": list(range(20)), "note": "resumed"}
    loaded = json.loads(codec.encode(value))
    sides: dict[str, dict[str, Callable[[], object]]] = {
        "set": {"before": lambda: codec.encode(value), "now": lambda: large.encode(value, "bench")},
        "get": {"before": lambda: loaded, "now": lambda: large.load(loaded, "k", "bench")},
    }
    print(f"\nsmall value ({len(codec.encode(value))} bytes), {rounds} rounds x {ops} calls, ns per call")
    print("(set: codec.encode before, worker.large.encode now; get: nothing before, worker.large.load now)")
    for op, by_side in sides.items():
        costs: dict[str, list[float]] = {side: [] for side in by_side}
        for _ in range(rounds):
            for side, call in by_side.items():
                start = time.perf_counter_ns()
                for _ in range(ops):
                    call()
                costs[side].append((time.perf_counter_ns() - start) / ops)
        before, now = statistics.median(costs["before"]), statistics.median(costs["now"])
        print(
            f"{op:<5} before {before:>8.0f}  now {now:>8.0f}  added {now - before:>6.0f} ns "
            f"(means: added {statistics.mean(costs['now']) - statistics.mean(costs['before']):.0f}; "
            f"p99 now {p99(costs['now']):.0f})"
        )
    print("against a set's or get's HTTP round trip to the state API of about 1 ms (bench_api.py)")


def with_s3(size: int, rounds: int, scratch: Path) -> None:
    """The same on moto's S3 server, in a process of its own (its memory is not ours)."""
    import socket
    import subprocess
    import sys

    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        for _ in range(100):
            try:
                client.create_bucket(Bucket="bench")
                break
            except Exception:
                time.sleep(0.2)
        os.environ["AIRFLOW_CONN_BENCH_S3"] = json.dumps(
            {
                "conn_type": "aws",
                "login": "testing",
                "password": "testing",
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            }
        )
        os.environ["AIRFLOW__STATE__OBJECT_STORAGE_PATH"] = "s3://bench_s3@bench/large"
        source = scratch / "source-s3.bin"
        _random_file(source, size)
        compare("s3 (moto's server in another process, same machine)", source, scratch, rounds)
    finally:
        server.terminate()
        server.wait()


def _random_file(path: Path, size: int) -> None:
    with path.open("wb") as out:
        for _ in range(size // MIB):
            out.write(os.urandom(MIB))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small-ops", type=int, default=100_000)
    parser.add_argument("--s3", action="store_true", help="also on moto's S3 server")
    parser.add_argument("--s3-size-mib", type=int, default=256)
    parser.add_argument("--s3-only", action="store_true", help="only the S3 rows")
    args = parser.parse_args()
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    scratch = Path(tempfile.mkdtemp(prefix="state-bench-large-"))
    try:
        store = scratch / "objects"
        store.mkdir()
        os.environ["AIRFLOW__STATE__OBJECT_STORAGE_PATH"] = f"file://{store}"
        if not args.s3_only:
            source = scratch / "source.bin"
            _random_file(source, args.size_mib * MIB)
            compare("file:// (local disk)", source, scratch, args.rounds)
            source.unlink()
            small_values(args.small_ops, args.rounds)
        if args.s3 or args.s3_only:
            with_s3(args.s3_size_mib * MIB, args.rounds, scratch)
    finally:
        for path in sorted(scratch.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        scratch.rmdir()


if __name__ == "__main__":
    main()
