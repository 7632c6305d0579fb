"""
Helpers for the Redis backend's tests: a throw-away redis-server on loopback.

A module of its own (not conftest) so test modules can import it by a name no other test
directory uses.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def redis_server() -> Iterator[str]:
    """Run redis-server on a free port of 127.0.0.1 in a temporary directory; yield its URL."""
    workdir = tempfile.mkdtemp(prefix="state-redis-")
    port = free_port()
    # --save '' and --appendonly no: nothing is persisted; the data dies with the process.
    command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--dir", workdir, "--daemonize", "no", "--loglevel", "warning"]
    log_path = os.path.join(workdir, "redis.log")
    # Output goes to a file, not a pipe nobody drains, which could fill up and stall the server.
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_until_up(url, server, log_path)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_until_up(url: str, server: subprocess.Popen[bytes], log_path: str) -> None:
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 15
    try:
        while True:
            if server.poll() is not None:
                with open(log_path, errors="replace") as log:
                    output = log.read()
                raise RuntimeError(f"redis-server exited with {server.returncode}: {output}")
            try:
                client.ping()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        client.close()


def have_redis_server() -> bool:
    return os.path.exists(REDIS_SERVER)
