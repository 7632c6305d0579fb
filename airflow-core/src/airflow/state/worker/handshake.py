"""
The task side of the handshake (the server side, and why it proves identity, is in
:mod:`airflow.state.api.handshake`): the task process has its own supervisor write a proof among
its rendered template fields, through the Execution API channel the supervisor authenticates with
the try's own token, and puts the fields back right after.

The task process never holds a key, and never sees the supervisor's token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from airflow.state.exceptions import StateUnavailableError


@contextlib.contextmanager
def proof_in_rendered_fields(ti: Any, field: str, proof: str) -> Iterator[None]:
    """Have the supervisor add *field* = *proof* to the task instance's rendered fields, then remove it."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import SetRenderedFields

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        raise StateUnavailableError("no task supervisor to prove this task instance's identity through")
    # What the task runner itself sent at start: the template fields as rendered for this try.
    original = task_runner._serialize_rendered_fields(ti.task) if ti.task.template_fields else {}

    def send(fields: dict[str, Any]) -> None:
        try:
            comms.send(SetRenderedFields(rendered_fields=fields))
        except Exception as error:  # the supervisor answers with the Execution API's error
            raise StateUnavailableError(
                f"the task supervisor could not store the state API handshake's proof ({error})"
            ) from error

    send({**original, field: proof})
    try:
        yield
    finally:
        # Airflow's Execution API cannot store empty rendered fields (it would render the task's
        # templates instead, and has no task there): a task without any keeps the field, emptied.
        send(original or {field: ""})
