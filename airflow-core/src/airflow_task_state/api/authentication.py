"""
Who is calling: the task instance named by a verified credential; or, on the first request of a
task process, by the try's proof (see :mod:`airflow_task_state.api.handshake`), for which that request's
answer grants a credential (:mod:`.first_credential`). Whether that task instance may still read or
write is :mod:`.task_instance_checks`'.
"""

from __future__ import annotations

import time
from typing import Annotated

import jwt
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airflow_task_state.api.credential_headers import ISSUED_CREDENTIAL
from airflow_task_state.api.credentials import (
    CREDENTIAL_LIFETIME_SECONDS,
    TaskInstanceClaims,
    issue_credential,
    verify_credential_until,
)
from airflow_task_state.api.errors import unauthorized
from airflow_task_state.api.first_credential import claims_granted_for_proof
from airflow_task_state.api.signing_keys import signing_key, verification_keys
from airflow_task_state.protocol import (
    CREDENTIAL_EXPIRES_HEADER,
    CREDENTIAL_HEADER,
    CREDENTIALS_PATH,
    PROOF_SCHEME,
)

_bearer = HTTPBearer(
    auto_error=False,
    description=f"A task credential, obtained through the handshake that ends at {CREDENTIALS_PATH}",
)


# Async: FastAPI runs a plain function dependency in its thread pool, a hop that costs more than
# checking a signature on every state request. Only a proof, once per task process, needs the database.
async def credential_claims(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TaskInstanceClaims:
    if credentials is None:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme != PROOF_SCHEME:
            raise unauthorized("missing bearer credential")
        ti_id, _, verifier = presented.partition(".")
        claims = await run_in_threadpool(claims_granted_for_proof, ti_id, verifier)
        credential = issue_credential(claims, signing_key())
        setattr(
            request.state,
            ISSUED_CREDENTIAL,
            [
                (CREDENTIAL_HEADER.lower().encode(), credential.encode()),
                (CREDENTIAL_EXPIRES_HEADER.lower().encode(), str(CREDENTIAL_LIFETIME_SECONDS).encode()),
            ],
        )
        return claims
    try:
        return verified_claims(credentials.credentials)
    except jwt.ExpiredSignatureError:
        raise unauthorized("credential expired") from None
    except jwt.InvalidTokenError as error:
        raise unauthorized(f"invalid credential ({error})") from None


# A task process sends one credential with every request for minutes: its signature is checked
# once per API server process and set of keys, its lifetime on every request.
_verified: dict[str, tuple[TaskInstanceClaims, float]] = {}
_verified_with: tuple[bytes, ...] = ()
_VERIFIED_KEPT = 4096


def verified_claims(token: str) -> TaskInstanceClaims:
    """The claims of a credential, verified (``jwt.InvalidTokenError`` if it is not valid now)."""
    global _verified, _verified_with
    keys = verification_keys()
    if keys != _verified_with:  # rotated: what the keys of before verified proves nothing now
        _verified, _verified_with = {}, keys
    known = _verified.get(token)
    if known is not None and time.time() <= known[1]:
        return known[0]
    claims, valid_until = verify_credential_until(token, keys)
    if len(_verified) >= _VERIFIED_KEPT:
        _verified.clear()
    _verified[token] = (claims, valid_until)
    return claims


Claims = Annotated[TaskInstanceClaims, Depends(credential_claims)]
