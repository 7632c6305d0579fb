"""
Metrics of the state backend, sent through Airflow's own ``Stats``: StatsD, Datadog or
OpenTelemetry, as ``[metrics]`` of the deployment configures it.

:func:`~airflow.state.configured_backend.get_state_backend` wraps the configured backend in a
:class:`MeasuredStateBackend` when ``[metrics]`` turns a metrics backend on; with metrics off the
backend is returned bare and costs nothing extra. Every name (prefixed with ``[metrics]
statsd_prefix``, ``airflow`` by default) carries the tags ``backend`` (the backend's class name)
and ``operation``:

* ``state.<operation>`` (counter): calls of one backend operation (``get``, ``get_versioned``,
  ``set``, ``write``, ``increment``, ``delete``, ``clear``, ``keys``, ``entries``, ``key_counts``,
  ``cleanup``), failed ones included; the async twin of an operation counts under its name.
* ``state.<operation>.duration`` (timer, milliseconds): how long each call took.
* ``state.conflicts`` (counter): conditional writes refused because another write came first.
* ``state.refused`` (counter, tag ``reason``: ``invalid_value``, ``invalid_type``,
  ``unsupported``): input the backend refused (bad keys, values, options, non-integer counters) or
  a capability it lacks.
* ``state.failed`` (counter, tag ``error``: the exception's class): any other error (the store is
  down, a timeout).
* ``state.value_bytes`` (timer used as a histogram; the value is bytes, not milliseconds): the size
  of each value written, in UTF-8.
* ``state.cleaned`` (counter): keys removed by ``cleanup`` (a dry run removes none).

A deployment has one configured backend, so plain StatsD, which drops tags, loses nothing by it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from airflow._shared.observability.metrics.stats import Stats
from airflow_shared.state import (
    BaseStateBackend,
    StateConflictError,
    StateEntryPage,
    StateScope,
    StateWriter,
    VersionedValue,
)

#: The backend operations measured; each async twin counts under the same name.
OPERATIONS = (
    "get",
    "get_versioned",
    "set",
    "write",
    "increment",
    "delete",
    "clear",
    "keys",
    "entries",
    "key_counts",
    "cleanup",
)


def metrics_enabled() -> bool:
    """Whether ``[metrics]`` turns on a metrics backend (StatsD, Datadog or OpenTelemetry)."""
    from airflow.configuration import conf

    return any(
        conf.getboolean("metrics", option, fallback=False)
        for option in ("statsd_on", "statsd_datadog_enabled", "otel_on")
    )


def ensure_stats_configured() -> None:
    """
    Build ``Stats`` from ``[metrics]`` in this process unless something did already.

    Airflow 3.2's scheduler, triggerer, dag processor and task runner initialise ``Stats``
    themselves, but its API server, where the state API runs, never does: ``Stats`` stays a
    no-op logger there. A factory set by anyone else is left alone.
    """
    if Stats.factory is None:  # type: ignore[attr-defined]
        from airflow.observability.metrics.stats_utils import get_stats_factory

        Stats.initialize(factory=get_stats_factory(Stats))  # type: ignore[attr-defined]


def _refusal_reason(error: BaseException) -> str | None:
    if isinstance(error, NotImplementedError):  # StateCapabilityError, or a listing not offered
        return "unsupported"
    if isinstance(error, ValueError):
        return "invalid_value"
    if isinstance(error, TypeError):
        return "invalid_type"
    return None


def _value_bytes(value: object) -> int | None:
    if not isinstance(value, str):
        return None  # refused by the backend: counted under state.refused, not measured
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return None


class _Measurement:
    """Times one backend call and counts it, its conflict, refusal or failure."""

    __slots__ = ("_names", "_start", "_tags")

    def __init__(self, names: tuple[str, str], tags: dict[str, str]) -> None:
        self._names = names
        self._tags = tags
        self._start = 0.0

    def __enter__(self) -> _Measurement:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        elapsed_ms = (time.perf_counter() - self._start) * 1000.0
        count_name, duration_name = self._names
        Stats.incr(count_name, tags=self._tags)
        Stats.timing(duration_name, elapsed_ms, tags=self._tags)
        if error is None:
            return
        if isinstance(error, StateConflictError):
            Stats.incr("state.conflicts", tags=self._tags)
        elif (reason := _refusal_reason(error)) is not None:
            Stats.incr("state.refused", tags={**self._tags, "reason": reason})
        elif isinstance(error, Exception):  # not KeyboardInterrupt, not a cancelled task
            Stats.incr("state.failed", tags={**self._tags, "error": type(error).__name__})


class MeasuredStateBackend(BaseStateBackend):
    """
    The configured backend, with every call counted and timed through ``Stats``.

    It delegates each method, sync and async, to :attr:`wrapped` (so a backend's own async client
    keeps being used) and declares the same capabilities; code that needs the backend's own class
    calls :func:`unwrap_state_backend`. Build it with :func:`measured`.
    """

    def __init__(self, wrapped: BaseStateBackend) -> None:
        self.wrapped = wrapped
        backend = type(wrapped).__name__
        self._measurements = {
            operation: (
                (f"state.{operation}", f"state.{operation}.duration"),
                {"backend": backend, "operation": operation},
            )
            for operation in OPERATIONS
        }
        self._backend_tags = {"backend": backend}

    def __getattr__(self, name: str) -> Any:
        # What a backend offers beyond the contract (its own helpers) stays reachable.
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"MeasuredStateBackend({self.wrapped!r})"

    def _measure(self, operation: str) -> _Measurement:
        names, tags = self._measurements[operation]
        return _Measurement(names, tags)

    def _value_written(self, value: object) -> None:
        size = _value_bytes(value)
        if size is not None:
            Stats.timing("state.value_bytes", size, tags=self._backend_tags)

    # --- sync --------------------------------------------------------------------------------

    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        with self._measure("get"):
            return self.wrapped.get(scope, key, session=session)

    def get_versioned(self, scope: StateScope, key: str, *, session: Any = None) -> VersionedValue | None:
        with self._measure("get_versioned"):
            return self.wrapped.get_versioned(scope, key, session=session)

    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        with self._measure("set"):
            self.wrapped.set(scope, key, value, session=session)
        self._value_written(value)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        with self._measure("set"):
            self.wrapped.set_by_try(scope, key, value, try_number=try_number, session=session)
        self._value_written(value)

    def write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int | None:
        with self._measure("write"):
            version = self.wrapped.write(
                scope,
                key,
                value,
                writer=writer,
                expires_at=expires_at,
                if_version=if_version,
                session=session,
            )
        self._value_written(value)
        return version

    def increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        with self._measure("increment"):
            return self.wrapped.increment(
                scope, key, by, writer=writer, expires_at=expires_at, session=session
            )

    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        with self._measure("delete"):
            self.wrapped.delete(scope, key, session=session)

    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        with self._measure("clear"):
            self.wrapped.clear(scope, all_map_indices=all_map_indices, session=session)

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        with self._measure("keys"):
            return self.wrapped.keys(scope, session=session)

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> StateEntryPage:
        with self._measure("entries"):
            return self.wrapped.entries(
                scope, key_prefix=key_prefix, offset=offset, limit=limit, session=session
            )

    def key_counts(self, scopes: Sequence[StateScope], *, session: Any = None) -> list[int]:
        with self._measure("key_counts"):
            return self.wrapped.key_counts(scopes, session=session)

    def cleanup(
        self,
        *,
        now: datetime,
        updated_before: datetime | None = None,
        batch_size: int = 1000,
        dry_run: bool = False,
        session: Any = None,
    ) -> int:
        with self._measure("cleanup"):
            removed = self.wrapped.cleanup(
                now=now,
                updated_before=updated_before,
                batch_size=batch_size,
                dry_run=dry_run,
                session=session,
            )
        if not dry_run:
            Stats.incr("state.cleaned", removed, tags=self._backend_tags)
        return removed

    # --- async: the wrapped backend's own twins, which may use a native async client ---------

    async def aget(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        with self._measure("get"):
            return await self.wrapped.aget(scope, key, session=session)

    async def aget_versioned(
        self, scope: StateScope, key: str, *, session: Any = None
    ) -> VersionedValue | None:
        with self._measure("get_versioned"):
            return await self.wrapped.aget_versioned(scope, key, session=session)

    async def aset(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        with self._measure("set"):
            await self.wrapped.aset(scope, key, value, session=session)
        self._value_written(value)

    async def aset_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        with self._measure("set"):
            await self.wrapped.aset_by_try(scope, key, value, try_number=try_number, session=session)
        self._value_written(value)

    async def awrite(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int | None:
        with self._measure("write"):
            version = await self.wrapped.awrite(
                scope,
                key,
                value,
                writer=writer,
                expires_at=expires_at,
                if_version=if_version,
                session=session,
            )
        self._value_written(value)
        return version

    async def aincrement(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        with self._measure("increment"):
            return await self.wrapped.aincrement(
                scope, key, by, writer=writer, expires_at=expires_at, session=session
            )

    async def adelete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        with self._measure("delete"):
            await self.wrapped.adelete(scope, key, session=session)

    async def aclear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        with self._measure("clear"):
            await self.wrapped.aclear(scope, all_map_indices=all_map_indices, session=session)

    async def akeys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        with self._measure("keys"):
            return await self.wrapped.akeys(scope, session=session)


@functools.cache
def _measured_class(backend_class: type[BaseStateBackend]) -> type[MeasuredStateBackend]:
    # The capability flags are class attributes that callers read on the class or the instance:
    # one subclass per wrapped class declares the same ones.
    return type(
        f"Measured{backend_class.__name__}",
        (MeasuredStateBackend,),
        {
            "supports_versions": backend_class.supports_versions,
            "supports_expiry": backend_class.supports_expiry,
            "supports_increment": backend_class.supports_increment,
            "__module__": __name__,
        },
    )


def measured(backend: BaseStateBackend) -> MeasuredStateBackend:
    """*backend* with every call counted and timed through ``Stats``."""
    if isinstance(backend, MeasuredStateBackend):
        return backend
    return _measured_class(type(backend))(backend)


def unwrap_state_backend(backend: BaseStateBackend) -> BaseStateBackend:
    """The backend itself, without the metrics wrapper (for code that needs its class)."""
    return backend.wrapped if isinstance(backend, MeasuredStateBackend) else backend
