"""
The one private name of Airflow's task runner the worker uses, behind one function.

The handshake writes its proof among the task instance's rendered fields, and Airflow's
``SetRenderedFields`` replaces them whole: the task's own fields must be sent along exactly as the
task runner sent them when the try started (serialized, truncated, secrets redacted), so that the
UI shows what it showed before and no secret is revealed. The task SDK publishes no function for
that; ``airflow.serialization.helpers.serialize_template_field`` (airflow-core, for the API server)
serializes one field but redacts nothing, and writing our own would copy Airflow's code.

Written against apache-airflow-task-sdk 1.2.1 (Airflow 3.2.1), where the task runner builds its
``SetRenderedFields`` with ``task_runner._serialize_rendered_fields(task)``; still so in 1.3.2
(Airflow 3.3.2). ``airflow-core/tests/test_task_runner_shim.py`` fails when a release renames it,
changes its signature, stops calling it, or stops redacting.
"""

from __future__ import annotations

from typing import Any

from airflow_task_state.exceptions import StateConfigurationError

__all__ = ["rendered_fields"]

_PRIVATE_NAME = "_serialize_rendered_fields"


def rendered_fields(task: Any) -> dict[str, Any]:
    """*task*'s template fields as the task runner sends them to Airflow (its rendered fields)."""
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
    fields: dict[str, Any] = serialize(task)
    return fields
