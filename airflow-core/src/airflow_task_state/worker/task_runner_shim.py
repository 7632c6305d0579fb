"""
The one private name of Airflow's task runner the worker uses, behind two functions.

The handshake writes its proof among the task instance's rendered fields, and Airflow's
``SetRenderedFields`` replaces them whole: the task's own fields must be sent along exactly as the
task runner sent them when the try started (serialized, truncated, secrets redacted), so that the
UI shows what it showed before and no secret is revealed. The task SDK publishes no function for
that; ``airflow.serialization.helpers.serialize_template_field`` (airflow-core, for the API server)
serializes one field but redacts nothing, and writing our own would copy Airflow's code.

The same function lets the proof ride on the write the task runner makes anyway as the try starts:
it builds the fields the task runner sends, before the task's code and the listeners' running hook.

Written against apache-airflow-task-sdk 1.2.1 (Airflow 3.2.1), where the task runner builds its
``SetRenderedFields`` with ``task_runner._serialize_rendered_fields(task)``; still so in 1.3.2
(Airflow 3.3.2). ``airflow-core/tests/test_task_runner_shim.py`` fails when a release renames it,
changes its signature, stops calling it, or stops redacting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_task_state.exceptions import StateConfigurationError

__all__ = ["rendered_fields", "send_along"]

log = logging.getLogger(__name__)

_PRIVATE_NAME = "_serialize_rendered_fields"
# Airflow's own function, once send_along has put another in its place.
_airflows_own: Callable[[Any], dict[str, Any]] | None = None


def rendered_fields(task: Any) -> dict[str, Any]:
    """*task*'s template fields as the task runner sends them to Airflow (its rendered fields)."""
    return _serializer()(task)


def send_along(extra: Callable[[Any], dict[str, Any]], *, alone: Callable[[], bool] = lambda: False) -> None:
    """
    From now on, in this process, the rendered fields the task runner sends for a task carry
    *extra*(task)'s fields too, whenever it sends any. For a task without template fields, for which
    it sends none, it sends *extra*'s alone if *alone*() says so then (the caller's promise that the
    write would be made anyway, a little later); else no write is added.
    """
    global _airflows_own
    if _airflows_own is not None:
        return
    from airflow.sdk.execution_time import task_runner

    _airflows_own = serialize = _serializer()

    def with_extra(task: Any) -> dict[str, Any]:
        fields = serialize(task)
        if not fields and not alone():
            return fields
        try:
            return {**fields, **extra(task)}
        except Exception:  # never the task runner's failure: its own fields go as they are
            log.warning("Could not add to the rendered fields of %s", task, exc_info=True)
            return fields

    setattr(task_runner, _PRIVATE_NAME, with_extra)


def _serializer() -> Callable[[Any], dict[str, Any]]:
    if _airflows_own is not None:
        return _airflows_own
    # Imported here: only task processes have a task runner to ask, and every process that loads the
    # state plugin imports the worker's modules.
    from airflow.sdk.execution_time import task_runner

    serialize = getattr(task_runner, _PRIVATE_NAME, None)
    if serialize is None:
        raise StateConfigurationError(
            f"this Airflow's task runner has no {_PRIVATE_NAME}(), which airflow-task-state uses to keep "
            "the task's rendered fields as they were while it proves the task's identity: install the "
            "airflow-task-state release made for this Airflow version"
        )
    return serialize  # type: ignore[no-any-return]
