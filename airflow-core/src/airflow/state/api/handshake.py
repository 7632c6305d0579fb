"""
The handshake: how a task process gets its credential while its worker holds no secret at all.

1. ``POST /challenges`` with a task instance id: the server answers a challenge, signed with a
   key only API servers hold, naming that task instance (and so its try: each try has its own
   id), valid two minutes.
2. The task process picks a random verifier and asks its supervisor to store
   ``proof(challenge, verifier)`` among the task instance's rendered template fields
   (``SetRenderedFields``). The supervisor sends it to the Execution API's ``PUT
   /task-instances/{id}/rtif`` with the try's own token, filling in its own id whatever the task
   asks, and Airflow checks that the token's subject is that id (the ``ti:self`` scope). So only
   the supervisor of that very try can put anything there.
3. ``POST /credentials`` with the challenge and the verifier: the server checks the challenge,
   reads the task instance's rendered fields from the database, and issues a credential for that
   task instance and try when the proof is there. The task then puts its rendered fields back.

Anyone may ask for a challenge; what it is worth rests on step 2 alone. The verifier never leaves
the task process except to this server, so someone who reads the rendered fields (the UI shows
them) cannot redeem the proof.
"""

from __future__ import annotations

import hmac
from typing import Any

import jwt
from airflow.state.api.credentials import (
    CHALLENGE_LIFETIME_SECONDS,
    CREDENTIAL_LIFETIME_SECONDS,
    TaskInstanceClaims,
    issue_challenge,
    issue_credential,
    verify_challenge,
)
from airflow.state.api.datamodels import (
    ChallengeRequest,
    ChallengeResponse,
    CredentialRequest,
    CredentialResponse,
)
from airflow.state.api.errors import refusal
from airflow.state.api.security import Claims, check_task_instance, forbidden, unauthorized
from airflow.state.api.signing_keys import signing_key, verification_keys
from airflow.state.protocol import (
    CHALLENGES_PATH,
    CREDENTIAL_RENEWAL_PATH,
    CREDENTIALS_PATH,
    PROOF_FIELD,
    Reason,
    proof,
)
from fastapi import APIRouter, status
from sqlalchemy import and_, select

router = APIRouter(tags=["Handshake"])

_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    401: {"description": "Invalid or expired challenge or credential (`invalid_token`)"},
    403: {"description": "No such task instance (`forbidden`), or no proof (`proof_not_found`)"},
    503: {"description": "The server cannot sign credentials (`misconfigured`); retry later"},
}


def _credential(claims: TaskInstanceClaims) -> CredentialResponse:
    return CredentialResponse(
        credential=issue_credential(claims, signing_key()), expires_in=CREDENTIAL_LIFETIME_SECONDS
    )


@router.post(CHALLENGES_PATH, responses=_DOCUMENTED)
def create_challenge(body: ChallengeRequest) -> ChallengeResponse:
    """A challenge for one task instance, to be proven through its supervisor (step 1)."""
    return ChallengeResponse(
        challenge=issue_challenge(str(body.task_instance_id), signing_key()),
        field=PROOF_FIELD,
        expires_in=CHALLENGE_LIFETIME_SECONDS,
    )


@router.post(CREDENTIALS_PATH, responses=_DOCUMENTED)
def redeem_challenge(body: CredentialRequest) -> CredentialResponse:
    """A credential for the task instance whose rendered fields hold the proof of the challenge (step 3)."""
    try:
        ti_id = verify_challenge(body.challenge, verification_keys())
    except jwt.ExpiredSignatureError:
        raise unauthorized("challenge expired: ask for a new one") from None
    except jwt.InvalidTokenError as error:
        raise unauthorized(f"invalid challenge ({error})") from None
    row = _task_instance_and_rendered_fields(ti_id)
    if row is None:
        raise forbidden(f"task instance {ti_id} does not exist")
    dag_id, run_id, task_id, map_index, try_number, rendered_fields = row
    found = rendered_fields.get(PROOF_FIELD) if isinstance(rendered_fields, dict) else None
    if not isinstance(found, str) or not hmac.compare_digest(found, proof(body.challenge, body.verifier)):
        raise refusal(
            status.HTTP_403_FORBIDDEN,
            Reason.PROOF_NOT_FOUND,
            f"the proof of this challenge is not among the rendered fields of task instance {ti_id}: only "
            "the supervisor of that task instance's running try can put it there, through Airflow's "
            "Execution API",
        )
    return _credential(TaskInstanceClaims(ti_id, dag_id, run_id, task_id, map_index, try_number))


@router.post(CREDENTIAL_RENEWAL_PATH, responses=_DOCUMENTED)
def renew_credential(claims: Claims) -> CredentialResponse:
    """A fresh credential for the same try, while it is running: no new handshake needed."""
    check_task_instance(claims, write=True)
    return _credential(claims)


def _task_instance_and_rendered_fields(ti_id: str) -> tuple[Any, ...] | None:
    from uuid import UUID

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
        # A verified challenge names the id of a ChallengeRequest, always a UUID.
        .where(TaskInstance.id == UUID(ti_id))
    )
    with create_session() as session:
        row = session.execute(query).first()
    return None if row is None else tuple(row)
