"""
Metrics of the state backend, sent through Airflow's own ``Stats``: StatsD, Datadog or
OpenTelemetry, as ``[metrics]`` of the deployment configures it.

:func:`~airflow.state.configured_backend.get_state_backend` wraps the configured backend in a
:class:`MeasuredStateBackend` when ``[metrics]`` turns a metrics backend on; with metrics off the
backend is returned bare and costs nothing extra. Every name (prefixed with ``[metrics]
statsd_prefix``, ``airflow`` by default) carries the tags ``backend`` (the backend's class name)
and ``operation``:

* ``state.<operation>`` (counter): calls of one backend operation (``get``, ``get_versioned``,
  ``set``, ``write``, ``increment``, ``delete``, ``clear``, ``get_many``, ``set_many``,
  ``delete_many``, ``keys``, ``entries``, ``key_counts``, ``cleanup``: every method of the
  contract), failed ones included; the async twin of an operation counts under its name, and a
  batch counts once, whatever its size.
* ``state.<operation>.duration`` (timer, milliseconds): how long each call took.
* ``state.conflicts`` (counter): conditional writes refused because another write came first.
* ``state.refused`` (counter, tag ``reason``: ``invalid_value``, ``invalid_type``,
  ``unsupported``): input the backend refused (bad keys, values, options, non-integer counters) or
  a capability it lacks.
* ``state.failed`` (counter, tag ``error``: the exception's class): any other error (the store is
  down, a timeout).
* ``state.value_bytes`` (timer used as a histogram; the value is bytes, not milliseconds): the size
  of each value written, in UTF-8 (each value of a ``set_many`` too).
* ``state.cleaned`` (counter): keys removed by ``cleanup`` (a dry run removes none).

A deployment has one configured backend, so plain StatsD, which drops tags, loses nothing by it.
"""

from __future__ import annotations

import abc
import functools
import inspect
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from airflow._shared.observability.metrics.stats import Stats
from airflow_shared.state import BaseStateBackend, StateConflictError, capability_names, contract_methods


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


# What a call reports beyond its count and time, by operation, once it returned.
def _value_of_set(
    backend: MeasuredStateBackend, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any
) -> None:
    # set, set_by_try and write take (scope, key, value, ...).
    backend._value_written(kwargs["value"] if "value" in kwargs else args[2])


def _values_of_set_many(
    backend: MeasuredStateBackend, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any
) -> None:
    for value in (kwargs["values"] if "values" in kwargs else args[1]).values():
        backend._value_written(value)


def _cleaned(
    backend: MeasuredStateBackend, args: tuple[Any, ...], kwargs: dict[str, Any], removed: Any
) -> None:
    if not kwargs.get("dry_run", False):
        Stats.incr("state.cleaned", removed, tags=backend._backend_tags)


_AFTER: dict[str, Callable[[MeasuredStateBackend, tuple[Any, ...], dict[str, Any], Any], None]] = {
    "set": _value_of_set,
    "write": _value_of_set,
    "set_many": _values_of_set_many,
    "cleanup": _cleaned,
}


def _operation(method: str) -> str:
    """The operation a contract method counts as: its async twin's is the sync name's."""
    sync = method[1:] if inspect.iscoroutinefunction(getattr(BaseStateBackend, method)) else method
    return "set" if sync == "set_by_try" else sync  # a try's write is a set


#: The operations measured, one per sync contract method (``set_by_try`` counts as ``set``).
OPERATIONS = tuple(dict.fromkeys(_operation(method) for method in contract_methods()))


def _measured_method(method: str) -> Callable[..., Any]:
    """*method* of the wrapped backend, counted and timed as its operation."""
    operation = _operation(method)
    after = _AFTER.get(operation)
    if inspect.iscoroutinefunction(getattr(BaseStateBackend, method)):

        async def measured_async(self: MeasuredStateBackend, *args: Any, **kwargs: Any) -> Any:
            with self._measure(operation):
                result = await getattr(self.wrapped, method)(*args, **kwargs)
            if after is not None:
                after(self, args, kwargs, result)
            return result

        call: Callable[..., Any] = measured_async
    else:

        def measured_sync(self: MeasuredStateBackend, *args: Any, **kwargs: Any) -> Any:
            with self._measure(operation):
                result = getattr(self.wrapped, method)(*args, **kwargs)
            if after is not None:
                after(self, args, kwargs, result)
            return result

        call = measured_sync
    call.__name__ = method
    call.__qualname__ = f"MeasuredStateBackend.{method}"
    call.__doc__ = f"The wrapped backend's ``{method}``, counted and timed as ``state.{operation}``."
    return call


class MeasuredStateBackend(BaseStateBackend):
    """
    The configured backend, with every call counted and timed through ``Stats``.

    Every method of the contract (:func:`~airflow_shared.state.contract_methods`), sync and async,
    is passed to the same method of :attr:`wrapped` (so a backend's own async client and its
    batches keep being used), and every capability reads as the wrapped backend's: the methods are
    generated from the contract, so one added to it later cannot be forgotten here. Code that
    needs the backend's own class calls :func:`unwrap_state_backend`. Build it with
    :func:`measured`.
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
        for name in capability_names():  # also what the instance declares beside its class
            setattr(self, name, getattr(wrapped, name))

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


for _method in contract_methods():
    setattr(MeasuredStateBackend, _method, _measured_method(_method))
# The four abstract methods are among those just set; mypy cannot see methods set by name.
abc.update_abstractmethods(MeasuredStateBackend)  # type: ignore[type-abstract]


@functools.cache
def _measured_class(backend_class: type[BaseStateBackend]) -> type[MeasuredStateBackend]:
    # The capabilities are class attributes that callers read on the class or the instance: one
    # subclass per wrapped class declares the same ones.
    capabilities = {name: getattr(backend_class, name) for name in capability_names()}
    return type(
        f"Measured{backend_class.__name__}",
        (MeasuredStateBackend,),
        {**capabilities, "__module__": __name__},
    )


def measured(backend: BaseStateBackend) -> MeasuredStateBackend:
    """*backend* with every call counted and timed through ``Stats``."""
    if isinstance(backend, MeasuredStateBackend):
        return backend
    return _measured_class(type(backend))(backend)


def unwrap_state_backend(backend: BaseStateBackend) -> BaseStateBackend:
    """The backend itself, without the metrics wrapper (for code that needs its class)."""
    return backend.wrapped if isinstance(backend, MeasuredStateBackend) else backend
