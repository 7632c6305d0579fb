"""
The task side of the handshake (the server side, and why it proves identity, is in
:mod:`airflow_task_state.api.handshake`): the task process has its own supervisor write a proof among
its rendered template fields, through the Execution API channel the supervisor authenticates with
the try's own token. The task process never holds a key, and never sees the supervisor's token.

The proof rides on the rendered fields the task runner writes anyway as the try starts, before the
task's code runs (:func:`ride_along`): the first state call then needs no write of its own, and a
task that never touches state pays only for drawing its verifier. A task without template fields,
for which Airflow writes none, has the task runner write the proof alone if its DAG file imported
the accessors, else has it written on its first state call.

One proof serves every process of a try. Its verifier is drawn once per try, as the try starts, so
the processes the task forks inherit it: whichever writes the proof first, the others find it there,
and concurrent handshakes cannot overwrite each other's proof. It is worth nothing without the
verifier, and once a process has presented the verifier to the API server it is removed as the try
ends (:func:`withdraw`); one whose verifier never left the try's processes proves nothing to anyone,
and is left where it is rather than paying a write. A ``multiprocessing`` child cannot reach the
supervisor (it closes standard input, the supervisor's socket), so a process that uses state writes
the proof before it forks, if it is not written yet.

The supervisor's channel is one socket, inherited by forked processes, and Airflow only guards it
against threads: each exchange here holds an ``fcntl`` lock on a file inherited the same way, so
two processes never interleave their frames; and a fork waits for an exchange in flight to end (the
handshake may run in a thread of its own), or the child would inherit Airflow's channel lock held.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from airflow_task_state.exceptions import StateConfigurationError, StateUnavailableError
from airflow_task_state.keep_choice import KEEP_FIELD, TASK_ATTRIBUTE, parse_keep_choice
from airflow_task_state.protocol import PROOF_FIELD, proof
from airflow_task_state.worker.task_runner_shim import rendered_fields, send_along

log = logging.getLogger(__name__)

# Imported by task code that uses state (``from airflow_task_state import task_state`` imports it).
ACCESSORS_MODULE = "airflow_task_state.worker.accessors"


@dataclass
class _TryProof:
    verifier: str
    # The task instance as the task runner has it, when the try was prepared as it started.
    ti: Any = None
    # An open file the try's forked processes inherit, so one they all see: locked (fcntl locks
    # are per process) around each exchange with the supervisor; its first byte says where the
    # proof stands: not written yet, riding on the task runner's write as the try starts, written,
    # presented to the API server by one of them, or withdrawn as the try ended.
    shared: IO[bytes] = field(default_factory=tempfile.TemporaryFile)

    @property
    def stage(self) -> bytes:
        return os.pread(self.shared.fileno(), 1, 0) or _NOT_WRITTEN

    @stage.setter
    def stage(self, value: bytes) -> None:
        os.pwrite(self.shared.fileno(), value, 0)


_NOT_WRITTEN, _RIDING, _WRITTEN, _PRESENTED, _WITHDRAWN = b"-", b"r", b"w", b"p", b"x"


# By task instance id (each try has its own). Inherited by forked processes, which is the point.
_proofs: dict[str, _TryProof] = {}
_proofs_lock = threading.Lock()
# Held by a thread of this process while it exchanges with the supervisor, and by a fork.
_exchange_lock = threading.Lock()


def ride_along() -> None:
    """
    As a task process starts: the proof goes with the rendered fields its task runner writes. For a
    task without template fields it goes alone if the accessors are imported by then (the DAG file
    imports them at its top, as an operator built on the resumable mixins does): the listener would
    write it as the try starts anyway (``start_handshake``), and written before the task's code, the
    first call does not wait for it.
    """
    send_along(_proof_fields, alone=lambda: ACCESSORS_MODULE in sys.modules)


def _proof_fields(task: Any) -> dict[str, Any]:
    """The proof (and the task's keep choice) for a write of the rendered fields by the task runner."""
    from airflow.sdk import get_current_context

    try:
        ti = get_current_context()["ti"]  # the try the task runner prepares or runs
        fields: dict[str, Any] = keep_choice_field(task)
    except Exception:  # no try running here, or a keep choice the first state call will report
        return {}
    held = _proof_of(str(ti.id))
    if held.stage == _WITHDRAWN:
        return {}
    if held.stage == _NOT_WRITTEN:
        held.stage = _RIDING
    return {**fields, PROOF_FIELD: proof(str(ti.id), held.verifier)}


def prepare(ti: Any) -> None:
    """
    As the try starts, before the task's code runs: draw the try's verifier now, so that every process
    it forks shares it. Airflow calls this after the task runner wrote the rendered fields, so a
    proof riding on them is there.
    """
    held = _proof_of(str(ti.id))
    held.ti = ti
    if held.stage == _RIDING:
        held.stage = _WRITTEN


def write_proof(ti: Any) -> None:
    """Have the try's proof written among the task instance's rendered fields, unless it is there already."""
    held = _proof_of(str(ti.id))
    with _supervisor_channel(held):
        _written(ti, held)


def verifier_to_present(ti: Any, *, rewrite: bool = False) -> str:
    """
    The try's verifier, to present to the API server, once its proof is among the task instance's
    rendered fields: written now unless a process of the try already wrote it or it rode on the
    task runner's write; with *rewrite*, written again (it may have been replaced: the task runner
    rewrites the rendered fields after some tasks).
    """
    held = _proof_of(str(ti.id))
    with _supervisor_channel(held):
        _written(ti, held, rewrite=rewrite)
        held.stage = _PRESENTED  # it leaves the try's processes: withdrawn as the try ends
    return held.verifier


def _written(ti: Any, held: _TryProof, *, rewrite: bool = False) -> None:
    """Write the proof unless it is there (call with the supervisor's channel held)."""
    if held.stage == _WITHDRAWN:  # a process still busy after its try ended (it gets nothing new)
        raise StateUnavailableError(f"the try of task instance {ti.id} has ended: no new credential")
    if rewrite or held.stage in (_NOT_WRITTEN, _RIDING):
        fields = {**_rendered_fields(ti), **keep_choice_field(getattr(ti, "task", None))}
        _send(ti, {**fields, PROOF_FIELD: proof(str(ti.id), held.verifier)})
        if held.stage != _PRESENTED:
            held.stage = _WRITTEN


def withdraw(ti: Any) -> None:
    """
    Put the rendered fields back as the task runner wrote them, if a process of the try presented
    the verifier (a proof whose verifier never left the try's processes is worth nothing: it stays).
    """
    held = _proofs.get(str(ti.id))
    if held is None:
        return
    with _supervisor_channel(held):
        if held.stage == _PRESENTED:
            # Airflow's Execution API cannot store empty rendered fields (it would render the task's
            # templates instead, and has no task there): a task without any keeps the field, emptied.
            # The task's choice stays: operators' views read it once the try has ended.
            try:
                kept = keep_choice_field(getattr(ti, "task", None))
            except StateConfigurationError:  # changed since the proof was written: the default, then
                kept = {}
            try:
                _send(ti, {**_rendered_fields(ti), **kept} or {PROOF_FIELD: ""})
            except StateUnavailableError as error:
                # A failed try that will be retried: Airflow gave the task instance its next try's id
                # before the listener ran (404). The proof names an id that no longer exists, so it
                # cannot be redeemed, and the next try writes its own rendered fields.
                if _status_code(error.__cause__) != 404:
                    raise
        held.stage = _WITHDRAWN


def _status_code(error: BaseException | None) -> Any:
    """The Execution API's HTTP status in an error the task supervisor answered with."""
    detail = getattr(getattr(error, "error", None), "detail", None)
    return detail.get("status_code") if isinstance(detail, dict) else None


def keep_choice_field(task: Any) -> dict[str, str | None]:
    """
    The task's ``keep_task_state``, as the rendered field the API server reads it from with the
    proof: ``None`` when the task does not set it (the deployment's default applies). Recorded
    either way, so that a missing field tells that no try's record is there (``clean --cleared``
    removes nothing on a guess). A value that is no choice refuses the handshake, so the task's
    first state call says what to set instead.
    """
    chosen = getattr(task, TASK_ATTRIBUTE, None)
    if chosen is None:
        return {KEEP_FIELD: None}
    try:
        where = f"{getattr(task, 'task_id', task)}.{TASK_ATTRIBUTE}"
        return {KEEP_FIELD: parse_keep_choice(chosen, where).value}
    except ValueError as error:
        raise StateConfigurationError(str(error)) from None


def _proof_of(ti_id: str) -> _TryProof:
    with _proofs_lock:
        held = _proofs.get(ti_id)
        if held is None:
            held = _proofs[ti_id] = _TryProof(secrets.token_urlsafe(32))
        return held


@contextlib.contextmanager
def _supervisor_channel(held: _TryProof) -> Iterator[None]:
    with _exchange_lock:
        fcntl.lockf(held.shared, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(held.shared, fcntl.LOCK_UN)


# The task runner's modules are imported where they are used: only task processes need them, and
# every process that loads the state plugin (API server, scheduler...) imports this module.


def _rendered_fields(ti: Any) -> dict[str, Any]:
    """What the task runner itself sent when the try started: its template fields, as rendered."""
    return rendered_fields(ti.task) if ti.task.template_fields else {}


def _send(ti: Any, fields: dict[str, Any]) -> None:
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import SetRenderedFields

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        raise StateUnavailableError("no task supervisor to prove this task instance's identity through")
    try:
        comms.send(SetRenderedFields(rendered_fields=fields))
    except OSError as error:
        raise StateUnavailableError(
            f"this process cannot reach its task supervisor ({error}) to prove its identity to the state "
            "API: a process started by multiprocessing has closed the supervisor's channel. Import the "
            "state accessors (from airflow_task_state import task_state) in the task itself before it forks, "
            "so that the proof is written before and the forked process only redeems it"
        ) from error
    except Exception as error:  # the supervisor answers with the Execution API's error
        raise StateUnavailableError(
            f"the task supervisor could not store the state API handshake's proof ({error})"
        ) from error


def _before_fork() -> None:
    # If the forking process uses state, the proof first: a multiprocessing child cannot reach the
    # supervisor, but it can redeem a proof already there with the verifier it inherits.
    if ACCESSORS_MODULE in sys.modules:
        for held in list(_proofs.values()):
            if held.ti is not None and held.stage in (_NOT_WRITTEN, _RIDING):
                try:
                    write_proof(held.ti)
                except Exception:  # the child's first state call meets it again, and reports it
                    log.debug("Could not write the state handshake's proof before forking", exc_info=True)
    _exchange_lock.acquire()


def _after_fork_in_parent() -> None:
    _exchange_lock.release()


def _after_fork_in_child() -> None:
    # Both were held when the process forked, or may have been, by threads the child does not have.
    global _proofs_lock, _exchange_lock
    _proofs_lock, _exchange_lock = threading.Lock(), threading.Lock()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)
