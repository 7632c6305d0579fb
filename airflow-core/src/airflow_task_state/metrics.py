"""
Metrics of the state backend through Airflow's own ``Stats``: the configured backend is wrapped
in a :class:`MeasuredStateBackend` only when ``[metrics]`` turns a metrics backend on. The
docs/metrics.md lists the names.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import inspect
import time
from collections.abc import Callable
from types import MethodType
from typing import Any

from airflow._shared.observability.metrics.stats import Stats
from airflow.configuration import conf
from airflow_shared.state import BaseStateBackend, StateConflictError, capability_names, contract_methods

from airflow_task_state.airflow_line import initialize_airflow_stats


def metrics_enabled() -> bool:
    """Whether ``[metrics]`` turns on a metrics backend (StatsD, Datadog or OpenTelemetry)."""
    return any(
        conf.getboolean("metrics", option, fallback=False)
        for option in ("statsd_on", "statsd_datadog_enabled", "otel_on")
    )


def ensure_stats_configured() -> None:
    """
    Build ``Stats`` from ``[metrics]`` unless something did already: Airflow 3.2's API server, where
    the state API runs, never does (its other components do), so ``Stats`` would stay a no-op there.
    """
    initialize_airflow_stats()


# Why input was refused, by the error's class; NotImplementedError: a capability or listing not offered.
_REFUSALS = ((NotImplementedError, "unsupported"), (ValueError, "invalid_value"), (TypeError, "invalid_type"))


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

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        elapsed_ms = (time.perf_counter() - self._start) * 1000.0
        count_name, duration_name = self._names
        Stats.incr(count_name, tags=self._tags)
        Stats.timing(duration_name, elapsed_ms, tags=self._tags)
        if error is None:
            return
        if isinstance(error, StateConflictError):
            Stats.incr("state.conflicts", tags=self._tags)
        elif reason := next((why for kind, why in _REFUSALS if isinstance(error, kind)), None):
            Stats.incr("state.refused", tags={**self._tags, "reason": reason})
        elif isinstance(error, Exception):  # not KeyboardInterrupt, not a cancelled task
            Stats.incr("state.failed", tags={**self._tags, "error": type(error).__name__})


def _operation(method: str) -> str:
    """The operation a contract method counts as: its async twin's is the sync name's."""
    sync = method[1:] if inspect.iscoroutinefunction(getattr(BaseStateBackend, method)) else method
    return "set" if sync == "set_by_try" else sync  # a try's write is a set


#: The operations measured, one per sync contract method (``set_by_try`` counts as ``set``).
OPERATIONS = tuple(dict.fromkeys(_operation(method) for method in contract_methods()))


#: The metastore's methods beyond the contract that the state API calls (a running try's writes,
#: their check in their own statement; its plain get and set on the event loop): the operation
#: each is measured as, and whether it is async. Measured only where the wrapped backend has them.
BEYOND_CONTRACT = {
    "write_while_running": ("write", False),
    "increment_while_running": ("increment", False),
    "write_while_running_on_event_loop": ("write", True),
    "get_versioned_on_event_loop": ("get_versioned", True),
}


def _measured_method(method: str, operation: str = "", is_async: bool | None = None) -> Callable[..., Any]:
    """*method* of the wrapped backend, counted and timed as its operation (by default, the contract's)."""
    operation = operation or _operation(method)
    # Only these report more than their count and time, once they returned.
    after = operation in ("set", "write", "set_many", "cleanup")

    def measured_sync(self: MeasuredStateBackend, *args: Any, **kwargs: Any) -> Any:
        with _Measurement(*self._measurements[operation]):
            result = getattr(self.wrapped, method)(*args, **kwargs)
        return self._returned(operation, args, kwargs, result) if after else result

    async def measured_async(self: MeasuredStateBackend, *args: Any, **kwargs: Any) -> Any:
        with _Measurement(*self._measurements[operation]):
            result = await getattr(self.wrapped, method)(*args, **kwargs)
        return self._returned(operation, args, kwargs, result) if after else result

    if is_async is None:
        is_async = inspect.iscoroutinefunction(getattr(BaseStateBackend, method))
    call: Callable[..., Any] = measured_async if is_async else measured_sync
    call.__name__ = method
    call.__qualname__ = f"MeasuredStateBackend.{method}"
    call.__doc__ = f"The wrapped backend's ``{method}``, counted and timed as ``state.{operation}``."
    return call


class MeasuredStateBackend(BaseStateBackend):
    """
    :attr:`wrapped` with every call counted and timed (build it with :func:`measured`). Its methods
    and capabilities are generated from the contract, so nothing added to it later is forgotten here.
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
        found = getattr(self.wrapped, name)
        measured_method = _BEYOND_CONTRACT_MEASURED.get(name)
        return found if measured_method is None else MethodType(measured_method, self)

    def __repr__(self) -> str:
        return f"MeasuredStateBackend({self.wrapped!r})"

    def _returned(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
        """*result*, once the sizes of the values written or the keys cleaned up are reported."""
        if operation == "cleanup":
            if not kwargs.get("dry_run", False):
                Stats.incr("state.cleaned", result, tags=self._backend_tags)
            return result
        if operation == "set_many":
            values = (kwargs["values"] if "values" in kwargs else args[1]).values()
        else:  # set, set_by_try and write take (scope, key, value, ...)
            values = [kwargs["value"] if "value" in kwargs else args[2]]
        for value in values:
            if isinstance(value, str):  # anything else was refused: counted under state.refused
                with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: refused too
                    Stats.timing("state.value_bytes", len(value.encode("utf-8")), tags=self._backend_tags)
        return result


for _method in contract_methods():
    setattr(MeasuredStateBackend, _method, _measured_method(_method))
_BEYOND_CONTRACT_MEASURED = {
    method: _measured_method(method, operation, is_async)
    for method, (operation, is_async) in BEYOND_CONTRACT.items()
}
# The four abstract methods are among those just set; mypy cannot see methods set by name.
abc.update_abstractmethods(MeasuredStateBackend)  # type: ignore[type-abstract]


@functools.cache
def _measured_class(backend_class: type[BaseStateBackend]) -> type[MeasuredStateBackend]:
    # The capabilities are class attributes that callers read on the class or the instance: one
    # subclass per wrapped class declares the same ones.
    attributes = {name: getattr(backend_class, name) for name in capability_names()}
    attributes["__module__"] = __name__
    return type(f"Measured{backend_class.__name__}", (MeasuredStateBackend,), attributes)


def measured(backend: BaseStateBackend) -> MeasuredStateBackend:
    """*backend* with every call counted and timed through ``Stats``."""
    return backend if isinstance(backend, MeasuredStateBackend) else _measured_class(type(backend))(backend)


def unwrap_state_backend(backend: BaseStateBackend) -> BaseStateBackend:
    """The backend itself, without the metrics wrapper (for code that needs its class)."""
    return backend.wrapped if isinstance(backend, MeasuredStateBackend) else backend
