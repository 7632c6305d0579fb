"""
When a task instance's state survives a clear: the choices of ``keep_task_state`` (a task's
attribute, and ``[state] keep_task_state`` for the deployment), named once for the task process,
the API server and the configuration. What each choice discards, and when, is in
:mod:`airflow_task_state.airflow_db.clears`.
"""

from __future__ import annotations

from enum import StrEnum


class KeepTaskState(StrEnum):
    """What a task instance's next try finds after someone clears it."""

    #: Kept when the cleared try had failed (the next try reconnects to its job); discarded when it
    #: had succeeded (the next try starts afresh). The default.
    AFTER_FAILURE = "after_failure"
    #: Kept on every clear, as on every retry.
    ALWAYS = "always"
    #: Discarded on every clear, even after a failure (retries still keep it).
    NEVER = "never"


#: The attribute a task (an operator class, or one task in the DAG file) sets to choose.
TASK_ATTRIBUTE = "keep_task_state"
#: The rendered field in which a try's supervisor records the task's choice for the API server
#: (beside the handshake's proof, see :mod:`airflow_task_state.worker.handshake`), and operators read it.
KEEP_FIELD = "airflow_task_state_keep"

_SPELLINGS = ", ".join(repr(choice.value) for choice in KeepTaskState)


def parse_keep_choice(value: object, where: str) -> KeepTaskState:
    """
    *value* as a choice: one of the names, ``True`` (keep always) or ``False`` (never keep);
    ``ValueError`` naming *where* it was set and what to set instead for anything else.
    """
    if isinstance(value, bool):
        return KeepTaskState.ALWAYS if value else KeepTaskState.NEVER
    text = value.strip().lower() if isinstance(value, str) else None
    if text in {choice.value for choice in KeepTaskState}:
        return KeepTaskState(text)
    raise ValueError(
        f"{where} is {value!r:.80}: set it to one of {_SPELLINGS} (or True for 'always', False for 'never')"
    )
