"""
State backend metrics arrive at a real StatsD receiver (a UDP socket of the test), through
Airflow's own Stats configured by ``[metrics]``, with the names docs/metrics.md documents.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from airflow_shared.state import AssetScope, StateConflictError, TaskScope
from airflow_shared.state.testing import (
    MemoryStateBackend,
    StateBackendConformance,
    StateBackendWrapperConformance,
)

MEMORY = "airflow_shared.state.testing.MemoryStateBackend"
TASK = TaskScope("dag", "run", "task", 0, dag_run_uid="uid-1")
ASSET = AssetScope(7)


class StatsdReceiver:
    """A StatsD server in miniature: the UDP datagrams sent to it, one metric line each."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]

    def lines(self, settle: float = 0.2) -> list[str]:
        """Every line received until none arrives for *settle* seconds."""
        received: list[str] = []
        self.socket.settimeout(settle)
        while True:
            try:
                data = self.socket.recv(65536)
            except TimeoutError:
                return received
            received.extend(data.decode().splitlines())

    def counters(self) -> Counter[str]:
        """``name -> total`` of the counters received (``airflow.state.get:1|c``)."""
        totals: Counter[str] = Counter()
        self.timers: dict[str, list[float]] = {}
        for line in self.lines():
            name, rest = line.split(":", 1)
            value, kind = rest.split("|")[:2]
            if kind == "c":
                totals[name] += int(value)
            else:
                assert kind == "ms", line
                self.timers.setdefault(name, []).append(float(value))
        return totals


def _reset_stats() -> None:
    from airflow._shared.observability.metrics import stats

    # Forget the logger built from an earlier test's [metrics], in this process: Airflow 3.3's
    # initialize() keeps the factory and logger in the module, 3.2's on the Stats class itself.
    if hasattr(stats, "_factory"):
        stats._factory = stats._backend = None
    else:
        type.__setattr__(stats.Stats, "factory", None)
        type.__setattr__(stats.Stats, "instance", None)


@pytest.fixture
def statsd(monkeypatch) -> Iterator[StatsdReceiver]:
    """[metrics] statsd_on, pointing at a receiver of this test; the configured backend rebuilt."""
    from airflow_task_state.configured_backend import reset_state_backend

    receiver = StatsdReceiver()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(receiver.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    _reset_stats()
    reset_state_backend()
    yield receiver
    reset_state_backend()
    _reset_stats()
    receiver.socket.close()


@pytest.fixture
def memory_backend(statsd, monkeypatch):
    from airflow_task_state import get_state_backend

    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", MEMORY)
    return get_state_backend()


def test_every_operation_is_counted_and_timed(statsd, memory_backend):
    backend = memory_backend
    backend.set(TASK, "k", "héllo")  # 6 bytes in UTF-8
    assert backend.get(TASK, "k") == "héllo"
    backend.set_by_try(TASK, "by_try", "12", try_number=2)
    assert backend.write(ASSET, "watermark", "100", if_version=0) == 1
    assert backend.get_versioned(ASSET, "watermark").version == 1
    assert backend.increment(TASK, "n", 5) == 5
    assert backend.keys(TASK) == ["by_try", "k", "n"]
    assert backend.entries(TASK).total == 3
    assert backend.key_counts([TASK, ASSET]) == [3, 1]
    backend.delete(TASK, "k")
    backend.clear(ASSET)
    assert asyncio.run(backend.aget(TASK, "n")) == "5"
    asyncio.run(backend.aset(TASK, "async", "abc"))

    counters = statsd.counters()
    assert counters == {
        "airflow.state.set": 3,  # set, set_by_try and the async aset
        "airflow.state.get": 2,
        "airflow.state.write": 1,
        "airflow.state.get_versioned": 1,
        "airflow.state.increment": 1,
        "airflow.state.keys": 1,
        "airflow.state.entries": 1,
        "airflow.state.key_counts": 1,
        "airflow.state.delete": 1,
        "airflow.state.clear": 1,
    }
    for operation, calls in counters.items():
        durations = statsd.timers[f"{operation}.duration"]
        assert len(durations) == calls, operation
        assert all(0 <= ms < 5000 for ms in durations), durations
    assert sorted(statsd.timers["airflow.state.value_bytes"]) == [2, 3, 3, 6]


def test_batches_are_counted_once_and_reach_the_backend_whole(statsd, memory_backend):
    backend = memory_backend
    assert backend.supports_atomic_many is True
    assert backend.set_many(TASK, {"a": "1", "b": "héllo"}) == {"a": 1, "b": 1}
    assert backend.get_many(TASK, ["a", "b", "c"]) == {"a": "1", "b": "héllo"}
    backend.delete_many(TASK, ["a"])
    assert asyncio.run(backend.aget_many(TASK, ["a", "b"])) == {"b": "héllo"}
    asyncio.run(backend.aset_many(TASK, {"c": "xyz"}))
    asyncio.run(backend.adelete_many(TASK, ["b", "c"]))

    counters = statsd.counters()
    # One count per batch, none per key: no write, get or delete was made key by key.
    assert counters == {
        "airflow.state.set_many": 2,
        "airflow.state.get_many": 2,
        "airflow.state.delete_many": 2,
    }
    assert len(statsd.timers["airflow.state.set_many.duration"]) == 2
    assert sorted(statsd.timers["airflow.state.value_bytes"]) == [1, 3, 6]


def test_conflicts_refusals_and_cleanup_are_counted(statsd, memory_backend):
    backend = memory_backend
    backend.write(TASK, "k", "v")
    with pytest.raises(StateConflictError):
        backend.write(TASK, "k", "late", if_version=0)
    with pytest.raises(StateConflictError):
        asyncio.run(backend.awrite(TASK, "k", "late", if_version=7))
    with pytest.raises(ValueError):
        backend.set(TASK, "", "v")  # empty key
    with pytest.raises(TypeError):
        backend.set(TASK, "k", None)
    backend.set(TASK, "text", '"words"')
    with pytest.raises(ValueError):
        backend.increment(TASK, "text")
    past = datetime.now(UTC) - timedelta(hours=1)
    for key in ("a", "b", "c"):
        backend.write(ASSET, key, "v", expires_at=past)
    assert backend.cleanup(now=datetime.now(UTC), dry_run=True) == 3
    assert backend.cleanup(now=datetime.now(UTC)) == 3

    counters = statsd.counters()
    assert counters["airflow.state.conflicts"] == 2
    assert counters["airflow.state.refused"] == 3
    assert counters["airflow.state.cleaned"] == 3  # the dry run removed nothing
    assert counters["airflow.state.cleanup"] == 2
    assert counters["airflow.state.write"] == 6
    assert counters["airflow.state.set"] == 3
    assert counters["airflow.state.increment"] == 1
    assert "airflow.state.failed" not in counters
    # Only values that were written are measured: "v" four times, '"words"' once.
    assert sorted(statsd.timers["airflow.state.value_bytes"]) == [1, 1, 1, 1, 7]


def test_influxdb_tags_carry_backend_operation_and_reason(statsd, memory_backend, monkeypatch):
    """StatsD with tags (``statsd_influxdb_enabled``) tells the backend, operation and reason."""
    from airflow_task_state import get_state_backend
    from airflow_task_state.configured_backend import reset_state_backend

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    _reset_stats()
    reset_state_backend()
    backend = get_state_backend()
    backend.get(TASK, "k")
    with pytest.raises(ValueError):
        backend.get(TASK, "")
    lines = statsd.lines()
    assert "airflow.state.get,backend=MemoryStateBackend,operation=get:1|c" in lines
    assert "airflow.state.refused,backend=MemoryStateBackend,operation=get,reason=invalid_value:1|c" in lines


def test_a_failing_store_is_counted_as_failed(statsd):
    from airflow_task_state.metrics import measured

    class Down(MemoryStateBackend):
        def get(self, scope, key, *, session=None):
            raise ConnectionError("store unreachable")

    _configure_stats_now()
    with pytest.raises(ConnectionError):
        measured(Down()).get(TASK, "k")
    counters = statsd.counters()
    assert counters == {"airflow.state.get": 1, "airflow.state.failed": 1}


def _configure_stats_now() -> None:
    from airflow_task_state.metrics import ensure_stats_configured

    ensure_stats_configured()


def test_metrics_off_returns_the_bare_backend_and_sends_nothing(statsd, monkeypatch):
    from airflow_task_state import get_state_backend
    from airflow_task_state.configured_backend import unwrap_state_backend

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "False")
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", MEMORY)
    backend = get_state_backend()
    assert type(backend) is MemoryStateBackend
    assert unwrap_state_backend(backend) is backend
    backend.set(TASK, "k", "v")
    assert statsd.lines() == []


def test_the_wrapper_declares_the_capabilities_and_unwraps(memory_backend):
    from airflow_task_state.configured_backend import unwrap_state_backend
    from airflow_task_state.metrics import MeasuredStateBackend, measured

    assert isinstance(memory_backend, MeasuredStateBackend)
    assert type(unwrap_state_backend(memory_backend)) is MemoryStateBackend
    for flag in ("supports_versions", "supports_expiry", "supports_increment"):
        assert getattr(memory_backend, flag) is True
        assert getattr(type(memory_backend), flag) is True
    assert measured(memory_backend) is memory_backend  # never measured twice

    class NoCapabilities(MemoryStateBackend):
        supports_versions = supports_expiry = supports_increment = False

    plain = measured(NoCapabilities())
    assert (plain.supports_versions, plain.supports_expiry, plain.supports_increment) == (False,) * 3


class WithStateApiCalls(MemoryStateBackend):
    """The metastore's calls beyond the contract that the state API makes, on the in-memory backend."""

    def write_while_running(self, scope, key, value, writer, expires_at, ti_id):
        return self.write(scope, key, value, writer=writer, expires_at=expires_at)

    def increment_while_running(self, scope, key, by, writer, expires_at, ti_id):
        return self.increment(scope, key, by, writer=writer, expires_at=expires_at)

    async def write_while_running_on_event_loop(self, scope, key, value, writer, expires_at, ti_id):
        return self.write_while_running(scope, key, value, writer, expires_at, ti_id)

    async def get_versioned_on_event_loop(self, scope, key):
        return self.get_versioned(scope, key)


@pytest.mark.any_database  # wraps the in-memory backend: nothing here depends on the database
def test_the_state_apis_calls_beyond_the_contract_count_as_their_operation(statsd, monkeypatch):
    """A running try's set reaches the backend by these calls: measured as the write and read they are."""
    from airflow_shared.state import StateWriter
    from airflow_task_state import get_state_backend

    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.WithStateApiCalls")
    backend, writer = get_state_backend(), StateWriter.task_try("dag", "run", "task", 0, 1)
    assert backend.write_while_running(TASK, "k", "abc", writer, None, "ti") == 1
    assert asyncio.run(backend.write_while_running_on_event_loop(TASK, "k", "de", writer, None, "ti")) == 2
    assert asyncio.run(backend.get_versioned_on_event_loop(TASK, "k")).value == "de"
    assert backend.increment_while_running(TASK, "n", 2, writer, None, "ti") == 2

    counters = statsd.counters()
    assert counters == {
        "airflow.state.write": 2,
        "airflow.state.get_versioned": 1,
        "airflow.state.increment": 1,
    }
    assert sorted(statsd.timers["airflow.state.value_bytes"]) == [2, 3]
    # A backend without them still has none: the state API then takes the contract's calls.
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", MEMORY)
    from airflow_task_state.configured_backend import reset_state_backend

    reset_state_backend()
    assert not hasattr(get_state_backend(), "write_while_running")


def test_the_configured_metastore_is_measured(statsd, make_asset):
    """The default backend on the database of the run, measured as deployed."""
    from airflow_task_state import get_state_backend
    from airflow_task_state.configured_backend import unwrap_state_backend
    from airflow_task_state.metastore import MetastoreStateBackend

    backend = get_state_backend()
    assert isinstance(unwrap_state_backend(backend), MetastoreStateBackend)
    scope = AssetScope(make_asset(1))
    backend.set(scope, "watermark", '"2026-01-01"')
    assert backend.get(scope, "watermark") == '"2026-01-01"'
    counters = statsd.counters()
    assert counters == {"airflow.state.set": 1, "airflow.state.get": 1}
    assert statsd.timers["airflow.state.value_bytes"] == [12]


@pytest.mark.any_database  # wraps the in-memory backend: nothing here depends on the database
class TestMeasuredBackendConforms(StateBackendConformance):
    """The wrapper changes nothing a caller sees: the whole kit passes through it."""

    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self, statsd):
        from airflow_task_state.metrics import ensure_stats_configured, measured

        ensure_stats_configured()
        return measured(MemoryStateBackend())


@pytest.mark.any_database
class TestMeasuredBackendIsTransparent(StateBackendWrapperConformance):
    """Every contract method and capability passes through the metrics wrapper, batches included."""

    @pytest.fixture
    def wrap(self, statsd):
        from airflow_task_state.metrics import ensure_stats_configured, measured

        ensure_stats_configured()
        return measured
