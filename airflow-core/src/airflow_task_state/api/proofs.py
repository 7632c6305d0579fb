"""
Who a proof speaks for: the running try whose rendered fields hold it (see
:mod:`airflow_task_state.api.handshake`; only the supervisor of that try can put it there). This decides
who is asking, and nothing more: the step that grants the credential (:mod:`.first_credential`)
does what a try's first touch of state needs.
"""

from __future__ import annotations

import hmac
from typing import Any
from uuid import UUID

from airflow_task_state.airflow_db.clears import decoded
from airflow_task_state.airflow_db.first_touch import first_touch_row, scope_of
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.errors import forbidden, unauthorized
from airflow_task_state.api.task_instance_checks import refuse_unless_running, remember_check, row_of
from airflow_task_state.protocol import PROOF_FIELD, PROOF_SCHEME, Reason, proof


def claims_for_proof(ti_id: str, verifier: str) -> tuple[TaskInstanceClaims, Any]:
    """
    The try the proof of *verifier* speaks for, and its row (``first_touch_row``): 403 unless the task
    instance *ti_id* is running and its rendered fields hold that proof (only the supervisor of its
    try can put it there).
    """
    try:
        UUID(ti_id)
    except ValueError:
        raise unauthorized(f"a {PROOF_SCHEME} names a task instance id, not {ti_id[:40]!r}") from None
    if not 32 <= len(verifier) <= 256:
        raise unauthorized(f"a {PROOF_SCHEME}'s verifier has 32 to 256 characters")
    row = row_of(first_touch_row(), ti_id)
    dag_id, run_id, task_id, map_index, state, try_number = row[:6]
    # A process left behind by a finished try keeps what it holds (a credential lives its ten
    # minutes), but gets nothing new.
    refuse_unless_running(ti_id, state, "obtain a credential")
    found = (decoded(row[-1]) or {}).get(PROOF_FIELD)
    if not isinstance(found, str) or not hmac.compare_digest(found, proof(ti_id, verifier)):
        raise forbidden(
            f"the proof of this verifier is not among the rendered fields of task instance {ti_id}: only "
            "the supervisor of that task instance's running try can put it there, through Airflow's "
            "Execution API",
            Reason.PROOF_NOT_FOUND,
        )
    claims = TaskInstanceClaims(ti_id, dag_id, run_id, task_id, map_index, try_number)
    # Checked as check_task_instance checks a read: the request this proof came with need not ask again.
    remember_check(claims, scope_of(row))
    return claims, row
