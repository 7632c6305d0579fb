"""Choosing the state backend from ``[state] backend``, the way ``[core] xcom_backend`` chooses XCom's."""

from __future__ import annotations

import threading

from airflow._shared.module_loading import import_string
from airflow.state import config
from airflow.state.metrics import ensure_stats_configured, measured, metrics_enabled
from airflow.state.metrics import unwrap_state_backend as unwrap_state_backend
from airflow_shared.state import BaseStateBackend

_lock = threading.Lock()
_instance: BaseStateBackend | None = None


def resolve_state_backend() -> type[BaseStateBackend]:
    """
    Return the class named by ``[state] backend``.

    :raises ValueError: when the option is empty.
    :raises ImportError: when the class cannot be imported.
    :raises TypeError: when it is not a subclass of ``BaseStateBackend``.
    """
    path = config.backend_path()
    if not path:
        raise ValueError(
            "[state] backend is empty; set it to the import path of a BaseStateBackend subclass, "
            "for example airflow.state.metastore.MetastoreStateBackend (the default)"
        )
    try:
        backend_class = import_string(path)
    except ImportError as error:
        raise ImportError(f"[state] backend {path!r} cannot be imported: {error}") from error
    if not isinstance(backend_class, type) or not issubclass(backend_class, BaseStateBackend):
        raise TypeError(
            f"[state] backend {path!r} is not a subclass of `BaseStateBackend` "
            f"(airflow_shared.state.BaseStateBackend)"
        )
    return backend_class


def get_state_backend() -> BaseStateBackend:
    """
    Return the process-wide instance of the configured backend, created on first use.

    With a metrics backend on in ``[metrics]`` (StatsD, Datadog, OpenTelemetry) the instance is
    wrapped so every call is counted and timed (:mod:`airflow.state.metrics`); it declares the same
    capabilities, and :func:`unwrap_state_backend` returns the backend itself. With metrics off
    it is the bare backend.
    """
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _instance = _with_metrics(resolve_state_backend()())
    return _instance


def _with_metrics(backend: BaseStateBackend) -> BaseStateBackend:
    if not metrics_enabled():
        return backend
    ensure_stats_configured()
    return measured(backend)


def reset_state_backend() -> None:
    """Forget the cached instance, so the next call re-reads ``[state] backend`` (tests, reconfiguration)."""
    global _instance
    with _lock:
        _instance = None
