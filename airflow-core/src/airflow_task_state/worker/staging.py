"""
Writes that count only if the try succeeds: what ``stage(...)`` keeps in the task process's memory.

When the try succeeds, the ``on_task_instance_success`` listener hook sends them all in one request
(:func:`commit`), which the API server applies in one atomic step, only because the try is in
``success`` and at most once per try. A failed try's hook drops them; when the process is killed, or
the try is cleared or defers, they vanish with the process. Forked processes read what was staged
before the fork, but only the task process commits: staging in a forked one raises, so that no
write is silently lost.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_shared.state import MAX_MANY_KEYS, StagedOp, incremented

from airflow_task_state import config
from airflow_task_state.protocol import TASK_STAGED_COMMIT_PATH, TTL_FIELD
from airflow_task_state.worker import large
from airflow_task_state.worker.client import StateClient

log = logging.getLogger(__name__)

#: Where a staged write goes: ``None`` for the task instance's state, ``(name, uri)`` for an asset's.
Target = tuple[str, str] | None

# The commit's JSON envelope, and some whitespace; what separates its entries. stage() counts both
# as commit() writes them: a body past [state] max_batch_bytes is refused after the try succeeded.
_ENVELOPE_BYTES = 64
_SEPARATOR = ","
# How often a try holding staged writes checks that its credential is still fresh: its commit
# runs after the try has ended, when no new credential is granted.
_RENEW_EVERY_SECONDS = 30.0


@dataclass(frozen=True)
class Staged:
    """One key's staged write: the value as JSON text (a set), or how much to add (an increment)."""

    op: StagedOp
    text: str | None = None
    by: int = 0
    ttl: float | str | None = None

    def read_over(self, key: str, stored_text: str | None) -> str | None:
        """What a read in the try sees: the staged value as JSON text, given the stored one."""
        if self.op is StagedOp.SET:
            return self.text
        if self.op is StagedOp.DELETE:
            return None
        # ValueError when the stored value is no integer: the commit would refuse it too.
        return str(incremented(key, stored_text, self.by))

    def then(self, later: Staged, key: str) -> Staged:
        """This write followed by *later* to the same key, as one write."""
        if later.op is not StagedOp.INCREMENT:
            return later
        ttl = later.ttl if later.ttl is not None else self.ttl
        if self.op is StagedOp.INCREMENT:
            incremented(key, str(self.by), later.by)  # the sum must stay a 64-bit integer
            return Staged(StagedOp.INCREMENT, by=self.by + later.by, ttl=ttl)
        # Over a staged set or delete the stored value no longer matters: the sum is known now.
        return Staged(StagedOp.SET, str(incremented(key, self.read_over(key, None), later.by)), ttl=ttl)

    def as_sent(self, *, upload: bool) -> Staged:
        """
        This write as the commit sends it: a value past ``max_value_bytes`` uploaded to object
        storage and replaced by its reference (not *upload*: by a stand-in as long, to size it); a
        staged file's reference, uploaded when it was staged, copied afresh if the commit comes so
        late that the server could refuse it (past half its commit window).
        """
        if self.text is None:
            return self
        if large.is_large(self.text):
            text = large.offload(self.text) if upload else large.placeholder_reference()
        elif upload and large.needs_fresh_copy(self.text):
            text = large.fresh_copy(self.text)
        else:
            return self
        return Staged(self.op, text, self.by, self.ttl)

    def entry(self, target: Target, key: str) -> str:
        """This write as one element of the commit's ``writes``."""
        fields = (
            {"scope": "task"} if target is None else {"scope": "asset", "name": target[0], "uri": target[1]}
        )
        fields.update(key=key, op=self.op.value)
        if self.op is StagedOp.INCREMENT:
            fields["by"] = self.by  # type: ignore[assignment]
        if self.ttl is not None:
            fields[TTL_FIELD] = self.ttl  # type: ignore[assignment]
        text = json.dumps(fields, ensure_ascii=False)
        if self.text is not None:
            text = text[:-1] + ', "value": ' + self.text + "}"
        return text


@dataclass
class _TryWrites:
    """What one try's task process has staged, by target and key, and the entries' size."""

    owner_pid: int
    writes: dict[tuple[Target, str], Staged] = field(default_factory=dict)
    sizes: dict[tuple[Target, str], int] = field(default_factory=dict)


_lock = threading.Lock()
_by_try: dict[str, _TryWrites] = {}  # by task instance id: each try has its own
_keeper: threading.Thread | None = None


def _reset_in_child() -> None:
    global _lock, _keeper
    _lock, _keeper = threading.Lock(), None


os.register_at_fork(after_in_child=_reset_in_child)


def begin(ti: Any) -> None:
    """The try starts in this process (the task process): only this process will commit."""
    with _lock:
        _by_try.setdefault(str(ti.id), _TryWrites(os.getpid()))


def stage(ti: Any, target: Target, key: str, write: Staged, what: str) -> None:
    """Stage *write* to *key* of *target*, merged with what was staged there before."""
    ti_id = str(ti.id)
    with _lock:
        held = _by_try.setdefault(ti_id, _TryWrites(os.getpid()))
        if held.owner_pid != os.getpid():
            raise RuntimeError(
                f"{what}: staged in a process forked from the task process (pid {held.owner_pid}); only "
                "the task process commits its staged writes when the try succeeds, so this one would be "
                "lost. Return the value to the task process and stage it there"
            )
        spot = (target, key)
        earlier = held.writes.get(spot)
        merged = write if earlier is None else earlier.then(write, key)
        # As commit() sends and joins them.
        size = len(merged.as_sent(upload=False).entry(target, key).encode()) + len(_SEPARATOR)
        total = sum(held.sizes.values()) - held.sizes.get(spot, 0) + size + _ENVELOPE_BYTES
        if earlier is None and len(held.writes) >= MAX_MANY_KEYS:
            raise ValueError(
                f"{what}: a try may stage writes to at most {MAX_MANY_KEYS} keys; write the others directly"
            )
        if total > (limit := config.max_batch_bytes()):
            raise ValueError(
                f"{what}: the try's staged writes would take {total} bytes to commit; the limit is {limit} "
                "([state] max_batch_bytes): stage fewer or smaller values"
            )
        first = not held.writes
        held.writes[spot], held.sizes[spot] = merged, size
    if first:
        _warn_at_exit()
        _hold_credential(ti)


def staged_in(ti: Any, target: Target) -> dict[str, Staged]:
    """The writes staged so far for *target*, by key (what reads in the try overlay)."""
    with _lock:
        held = _by_try.get(str(ti.id))
        if held is None:
            return {}
        return {key: write for (where, key), write in held.writes.items() if where == target}


def anything_staged() -> bool:
    """Whether any try of this process has staged a write (reads skip the overlay otherwise)."""
    return any(held.writes for held in _by_try.values())


def drop(ti: Any) -> int:
    """Forget the try's staged writes (the try failed); return how many there were."""
    with _lock:
        held = _by_try.pop(str(ti.id), None)
    return 0 if held is None else len(held.writes)


def commit(ti: Any) -> int:
    """
    Send the try's staged writes to be applied (the try has succeeded); return how many. Only the
    task process commits. Safe to retry: the server applies one try's commit at most once.
    """
    with _lock:
        held = _by_try.get(str(ti.id))
        if held is None or held.owner_pid != os.getpid():
            return 0
        _by_try.pop(str(ti.id))
    if not held.writes:
        return 0
    # Large values are uploaded now, the try having succeeded: each reference is sent at once, well
    # within its commit window, and a commit that never arrives leaves only collectable objects.
    sent = (write.as_sent(upload=True).entry(*spot) for spot, write in held.writes.items())
    body = '{"writes": [' + _SEPARATOR.join(sent) + "]}"
    client = StateClient(ti)
    path = TASK_STAGED_COMMIT_PATH.format(task_instance_id=client.ti_id)
    answer = client.request("POST", path, content=body.encode()).json()
    if not answer.get("applied"):
        log.info(
            "The staged writes of this try were committed before (a retried request); nothing more to do"
        )
    return len(held.writes)


_warning_at_exit_in: int | None = None


def _warn_at_exit() -> None:
    # Registered by the process that stages, not at import: Airflow's supervisor clears the atexit
    # handlers registered before it forked the task process, and runs only those registered after.
    global _warning_at_exit_in
    if _warning_at_exit_in != os.getpid():
        _warning_at_exit_in = os.getpid()
        atexit.register(_warn_if_never_committed)


def _hold_credential(ti: Any) -> None:
    """
    Get the try's credential now and keep it fresh while writes are staged: the commit is sent once
    the try has succeeded, when the server grants no new one (it does only to running tries).
    """
    global _keeper
    client = StateClient(ti)
    if client.in_process:
        return
    client.hold_credential()
    with _lock:
        if _keeper is not None and _keeper.is_alive():
            return
        _keeper = threading.Thread(
            target=_keep_fresh, args=(client,), name="state-staged-credential", daemon=True
        )
        _keeper.start()


def _keep_fresh(client: StateClient) -> None:
    while True:
        time.sleep(_RENEW_EVERY_SECONDS)
        with _lock:
            if client.ti_id not in _by_try:
                return
        try:
            client.hold_credential()
        except Exception:
            log.debug("Could not renew the credential the staged writes' commit needs", exc_info=True)


def _warn_if_never_committed() -> None:
    # A deferral or a reschedule ends the task process with no listener hook: what was staged is
    # lost, and the task should know. (A SIGKILL runs nothing, and needs no warning: nothing applies.)
    for ti_id, held in list(_by_try.items()):
        if held.writes and held.owner_pid == os.getpid():
            log.warning(
                "Task instance %s: %d staged write(s) were never committed: the task process ended without "
                "the try succeeding in it (a deferral or reschedule ends the process; stage writes after "
                "resuming). Nothing of them was applied.",
                ti_id,
                len(held.writes),
            )
