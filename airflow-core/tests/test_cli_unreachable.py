"""
A metadata database or state backend that cannot be reached ends `airflow state` commands with one
line naming what failed, where and what to check, at once when the server refuses connections; a
bug in a backend keeps its traceback.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from airflow_shared.state import BaseStateBackend
from airflow_shared.state._memory import MemoryStateBackend
from airflow_task_state.configured_backend import reset_state_backend
from state_testing.airflow_cli import run_airflow

pytestmark = pytest.mark.any_database

TI = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def configured(monkeypatch) -> Iterator[pytest.MonkeyPatch]:
    """Environment for this test's `airflow` processes, and the in-process backend re-read."""
    reset_state_backend()
    yield monkeypatch
    monkeypatch.undo()
    reset_state_backend()


def _one_line(result) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_unreachable_redis_is_one_line_naming_backend_address_and_what_to_check(configured, closed_port):
    configured.setenv("AIRFLOW__STATE__BACKEND", "airflow_state_redis.RedisStateBackend")
    configured.setenv("AIRFLOW__STATE_REDIS__URL", f"redis://:hunter2@127.0.0.1:{closed_port}/0")
    line = _one_line(run_airflow("state", "clean", "--dry-run", check=False))
    assert line.startswith("cannot reach the state backend RedisStateBackend ([state] backend): ")
    assert f"127.0.0.1:{closed_port}" in line and "hunter2" not in line
    assert "Connection refused" in line and "Check that the server is running" in line


def test_a_redis_that_refuses_connections_fails_at_once_in_the_cli(configured, closed_port, refused):
    configured.setenv("AIRFLOW__STATE__BACKEND", "airflow_state_redis.RedisStateBackend")
    configured.setenv("AIRFLOW__STATE_REDIS__URL", f"redis://127.0.0.1:{closed_port}/0")
    refused("clean", "--dry-run")  # the first command in this process also loads the CLI's modules
    started = time.monotonic()
    message = refused("clean", "--dry-run")
    # A task's client retries 8 times over about 10 s (5.5 s on average with the jitter): nothing
    # listening is not worth waiting for when a person waits on the answer.
    assert time.monotonic() - started < 1.5
    assert "cannot reach the state backend RedisStateBackend" in message


# A read, and a write: Airflow's action logging and migration check reach the database first.
@pytest.mark.parametrize("command", [("list", *TI), ("set", "k", "1", *TI)], ids=lambda c: c[0])
def test_a_database_that_is_down_is_one_line(configured, closed_port, command):
    configured.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        f"postgresql+psycopg2://airflow:hunter2@127.0.0.1:{closed_port}/airflow",
    )
    line = _one_line(run_airflow("state", *command, check=False))
    url = f"postgresql+psycopg2://airflow:***@127.0.0.1:{closed_port}/airflow"
    assert line.startswith(f"cannot reach the metadata database at {url}: ")
    assert "Connection refused" in line and "[database] sql_alchemy_conn" in line


class Unreachable(MemoryStateBackend):
    """A backend whose server refuses connections, as a plain socket reports it."""

    def cleanup(self, **options):
        raise ConnectionRefusedError(111, "Connection refused")


class Broken(MemoryStateBackend):
    """A backend with a bug."""

    def cleanup(self, **options):
        raise RuntimeError("a bug")


def test_any_backend_connection_failure_is_one_line_with_what_to_check(configured, refused):
    configured.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.Unreachable")
    assert refused("clean", "-y") == (
        "cannot reach the state backend Unreachable ([state] backend): [Errno 111] Connection refused. "
        "Check that its server is running and that its settings point at it"
    )


def test_a_backend_bug_keeps_its_traceback(configured, airflow_parser):
    configured.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.Broken")
    args = airflow_parser.parse_args(["state", "clean", "-y"])
    with pytest.raises(RuntimeError, match="a bug"):
        args.func(args)
    assert issubclass(Broken, BaseStateBackend)
