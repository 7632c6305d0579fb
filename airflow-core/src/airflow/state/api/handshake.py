"""
The handshake: how a task process gets its credential while its worker holds no secret at all.

1. The task process holds a random verifier, one per try (see :mod:`airflow.state.worker.handshake`),
   and asks its supervisor to store ``proof(task instance id, verifier)`` among the task instance's
   rendered template fields (``SetRenderedFields``). The supervisor sends it to the Execution API's
   ``PUT /task-instances/{id}/rtif`` with the try's own token, filling in its own id whatever the task
   asks, and Airflow checks that the token's subject is that id (the ``ti:self`` scope). So only the
   supervisor of that very try can put anything there.
2. ``POST /credentials`` with the task instance id and the verifier: the server reads the task
   instance and its rendered fields from the database and issues a credential for that task instance
   and try when the try is running and the proof is there.

Nothing here is a secret but the verifier, which never leaves the try's processes except to this
server: someone who reads the rendered fields (the UI shows them) cannot redeem the proof, and a
try that has ended cannot get a credential any more, whatever it still holds.
"""

from __future__ import annotations

import hmac
from typing import Any
from uuid import UUID

from airflow.state.api.credentials import (
    CREDENTIAL_LIFETIME_SECONDS,
    TaskInstanceClaims,
    issue_credential,
)
from airflow.state.api.datamodels import CredentialRequest, CredentialResponse
from airflow.state.api.errors import refusal
from airflow.state.api.request_checks import SmallBodyRoute
from airflow.state.api.security import Claims, check_task_instance, forbidden
from airflow.state.api.signing_keys import signing_key
from airflow.state.protocol import (
    CREDENTIAL_RENEWAL_PATH,
    CREDENTIALS_PATH,
    PROOF_FIELD,
    RETIRED_CHALLENGES_PATH,
    Reason,
    proof,
)
from fastapi import APIRouter, status
from sqlalchemy import and_, select

# Every route here answers anyone: its body is bounded before it is read.
router = APIRouter(tags=["Handshake"], route_class=SmallBodyRoute)

_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    401: {"description": "Invalid or expired credential (`invalid_token`)"},
    403: {
        "description": "No such task instance (`forbidden`), a try that is not running (`not_running`), "
        "or no proof (`proof_not_found`)"
    },
    413: {"description": "A body over 4 KiB (`body_too_large`)"},
    503: {"description": "The server cannot sign credentials (`misconfigured`); retry later"},
}


def _credential(claims: TaskInstanceClaims) -> CredentialResponse:
    return CredentialResponse(
        credential=issue_credential(claims, signing_key()), expires_in=CREDENTIAL_LIFETIME_SECONDS
    )


@router.post(CREDENTIALS_PATH, responses=_DOCUMENTED)
def redeem_proof(body: CredentialRequest) -> CredentialResponse:
    """A credential for the running try whose rendered fields hold the proof of this verifier."""
    from airflow.utils.state import TaskInstanceState

    ti_id = str(body.task_instance_id)
    row = _task_instance_and_rendered_fields(body.task_instance_id)
    if row is None:
        raise forbidden(f"task instance {ti_id} does not exist: its try has ended and a newer one started")
    dag_id, run_id, task_id, map_index, try_number, state, rendered_fields = row
    if state != TaskInstanceState.RUNNING:
        # A process left behind by a finished try keeps what it holds (a credential lives its ten
        # minutes), but gets nothing new.
        raise forbidden(
            f"task instance {ti_id} is {state}: only a running try may obtain a credential",
            Reason.NOT_RUNNING,
        )
    found = rendered_fields.get(PROOF_FIELD) if isinstance(rendered_fields, dict) else None
    if not isinstance(found, str) or not hmac.compare_digest(found, proof(ti_id, body.verifier)):
        raise refusal(
            status.HTTP_403_FORBIDDEN,
            Reason.PROOF_NOT_FOUND,
            f"the proof of this verifier is not among the rendered fields of task instance {ti_id}: only "
            "the supervisor of that task instance's running try can put it there, through Airflow's "
            "Execution API",
        )
    return _credential(TaskInstanceClaims(ti_id, dag_id, run_id, task_id, map_index, try_number))


@router.post(CREDENTIAL_RENEWAL_PATH, responses=_DOCUMENTED)
def renew_credential(claims: Claims) -> CredentialResponse:
    """A fresh credential for the same try, while it is running: no new handshake needed."""
    check_task_instance(claims, write=True)
    return _credential(claims)


@router.post(RETIRED_CHALLENGES_PATH, status_code=status.HTTP_410_GONE, include_in_schema=False)
def retired_challenge() -> None:
    """What a task process of airflow-task-state 0.4 or earlier asks first: tell it to upgrade."""
    raise refusal(
        status.HTTP_410_GONE,
        Reason.INVALID_REQUEST,
        "this API server runs airflow-task-state 0.5 or later, whose handshake needs no challenge: "
        "install the same version of airflow-task-state on the workers as on the API servers",
    )


def _task_instance_and_rendered_fields(ti_id: UUID) -> tuple[Any, ...] | None:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    query = (
        select(
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.state,
            Rendered.rendered_fields,
        )
        .outerjoin(
            Rendered,
            and_(
                Rendered.dag_id == TaskInstance.dag_id,
                Rendered.run_id == TaskInstance.run_id,
                Rendered.task_id == TaskInstance.task_id,
                Rendered.map_index == TaskInstance.map_index,
            ),
        )
        .where(TaskInstance.id == ti_id)
    )
    with create_session() as session:
        row = session.execute(query).first()
    return None if row is None else tuple(row)
