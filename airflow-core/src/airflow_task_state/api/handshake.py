"""
The handshake's routes: how a task process redeems the proof its supervisor stored among its try's
rendered fields (docs/security.md, "The handshake"; the proof is checked in
:mod:`airflow_task_state.api.proofs`, the credential granted by
:mod:`airflow_task_state.api.first_credential`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status

from airflow_task_state.api.authentication import Claims
from airflow_task_state.api.credentials import credential_answer
from airflow_task_state.api.datamodels import CredentialRequest, CredentialResponse
from airflow_task_state.api.errors import documented, refusal
from airflow_task_state.api.first_credential import claims_granted_for_proof
from airflow_task_state.api.request_checks import SmallBodyRoute
from airflow_task_state.api.signing_keys import signing_key
from airflow_task_state.api.task_instance_checks import check_task_instance
from airflow_task_state.protocol import (
    CREDENTIAL_RENEWAL_PATH,
    CREDENTIALS_PATH,
    RETIRED_CHALLENGES_PATH,
    Reason,
)

# Every route here answers anyone: its body is bounded before it is read.
router = APIRouter(tags=["Handshake"], route_class=SmallBodyRoute)

_DOCUMENTED = documented(
    {
        401: "Invalid or expired credential (`invalid_token`)",
        403: "No such task instance (`forbidden`), a try that is not running (`not_running`), or no "
        "proof (`proof_not_found`)",
        413: "A body over 4 KiB (`body_too_large`)",
        503: "The server cannot sign credentials (`misconfigured`); retry later",
    }
)


@router.post(CREDENTIALS_PATH, responses=_DOCUMENTED, response_model=CredentialResponse)
def redeem_proof(body: CredentialRequest) -> dict[str, Any]:
    """A credential for the running try whose rendered fields hold the proof of this verifier."""
    claims = claims_granted_for_proof(str(body.task_instance_id), body.verifier)
    return credential_answer(claims, signing_key())


@router.post(CREDENTIAL_RENEWAL_PATH, responses=_DOCUMENTED, response_model=CredentialResponse)
def renew_credential(claims: Claims) -> dict[str, Any]:
    """A fresh credential for the same try, while it is running: no new handshake needed."""
    check_task_instance(claims, write=True)
    return credential_answer(claims, signing_key())


@router.post(RETIRED_CHALLENGES_PATH, status_code=status.HTTP_410_GONE, include_in_schema=False)
def retired_challenge() -> None:
    """What a task process of airflow-task-state 0.4 or earlier asks first: tell it to upgrade."""
    raise refusal(
        status.HTTP_410_GONE,
        Reason.INVALID_REQUEST,
        "this API server runs airflow-task-state 0.5 or later, whose handshake needs no challenge: "
        "install the same version of airflow-task-state on the workers as on the API servers",
    )
