"""Choosing the state backend from ``[state] backend``, the way ``[core] xcom_backend`` chooses XCom's."""

from __future__ import annotations

import threading

from airflow._shared.module_loading import import_string
from airflow_shared.state import BaseStateBackend

from airflow_task_state import config
from airflow_task_state.metrics import ensure_stats_configured, measured, metrics_enabled
from airflow_task_state.metrics import unwrap_state_backend as unwrap_state_backend

_lock = threading.Lock()
_instance: BaseStateBackend | None = None


def resolve_state_backend() -> type[BaseStateBackend]:
    """The class ``[state] backend`` names; ``ValueError``, ``ImportError`` or ``TypeError`` say why not."""
    path = config.backend_path()
    if not path:
        raise ValueError(
            "[state] backend is empty; set it to the import path of a BaseStateBackend subclass, "
            "for example airflow_task_state.metastore.MetastoreStateBackend (the default)"
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
    The process-wide instance of the configured backend, created on first use; measured when
    ``[metrics]`` is on (:func:`unwrap_state_backend` returns the backend itself).
    """
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                backend = resolve_state_backend()()
                if metrics_enabled():
                    ensure_stats_configured()
                    backend = measured(backend)
                _instance = backend
    return _instance


def reset_state_backend() -> None:
    """Forget the cached instance, so the next call re-reads ``[state] backend`` (tests, reconfiguration)."""
    global _instance
    with _lock:
        _instance = None
