"""
The credentials a task process holds once it has proven which task instance it runs: HS256 JWTs
with an audience of their own (no token signed with a related key passes for one), whose lifetime
the server caps whatever their ``exp`` and ``iat`` claim.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import jwt

from airflow_task_state.api.signing_keys import use_process_key

ALGORITHM = "HS256"
CREDENTIAL_AUDIENCE = "airflow-task-state"
# A running try renews its credential when half of this is left (one handshake per task process);
# a credential kept after its try ended works for what is left of this, for reads of its own state.
CREDENTIAL_LIFETIME_SECONDS = 600
# Workers' and API servers' clocks differ a little.
CLOCK_LEEWAY_SECONDS = 30


@dataclass(frozen=True)
class TaskInstanceClaims:
    """The task instance, and its try, that a credential speaks for."""

    ti_id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int


def grant_in_process(ti: Any) -> dict[str, Any]:
    """A credential for *ti* under ``dag.test()``, signed with a key only this process holds: no proof."""
    map_index = -1 if ti.map_index is None else ti.map_index
    claims = TaskInstanceClaims(str(ti.id), ti.dag_id, ti.run_id, ti.task_id, map_index, ti.try_number)
    return credential_answer(claims, use_process_key())


def credential_answer(claims: TaskInstanceClaims, key: bytes) -> dict[str, Any]:
    """The body that hands a task process its credential (see datamodels.CredentialResponse)."""
    return {"credential": issue_credential(claims, key), "expires_in": CREDENTIAL_LIFETIME_SECONDS}


def issue_credential(claims: TaskInstanceClaims, key: bytes, now: float | None = None) -> str:
    issued = int(time.time() if now is None else now)
    payload = {**asdict(claims), "sub": claims.ti_id, "aud": CREDENTIAL_AUDIENCE, "iat": issued}
    return jwt.encode({**payload, "exp": issued + CREDENTIAL_LIFETIME_SECONDS}, key, algorithm=ALGORITHM)


def verify_credential_until(token: str, keys: Sequence[bytes]) -> tuple[TaskInstanceClaims, float]:
    """
    The claims of a valid credential and the time (``time.time()``) until which it is valid;
    ``jwt.InvalidTokenError`` otherwise.
    """
    lifetime = CREDENTIAL_LIFETIME_SECONDS
    payload = None
    for key in keys:
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=CREDENTIAL_AUDIENCE,
                leeway=CLOCK_LEEWAY_SECONDS,
                # Time is checked below, against one clock, with the server's lifetime cap.
                options={"require": ["exp", "iat", "aud", "sub"], "verify_exp": False, "verify_iat": False},
            )
            break
        except jwt.InvalidSignatureError:
            continue  # signed with another key: try the next (the one being rotated out)
    if payload is None:
        raise jwt.InvalidSignatureError("signature verification failed")
    issued, expires = payload["iat"], payload["exp"]
    if not isinstance(issued, int | float) or not isinstance(expires, int | float):
        raise jwt.InvalidTokenError("iat and exp must be numbers")
    if expires - issued > lifetime:
        raise jwt.InvalidTokenError(f"lives longer than the {lifetime} s the server allows")
    if issued > time.time() + CLOCK_LEEWAY_SECONDS:
        raise jwt.ImmatureSignatureError("issued in the future")
    valid_until = min(expires, issued + lifetime) + CLOCK_LEEWAY_SECONDS
    if time.time() > valid_until:
        raise jwt.ExpiredSignatureError("expired")
    try:
        claims = TaskInstanceClaims(
            ti_id=str(payload["ti_id"]),
            dag_id=str(payload["dag_id"]),
            run_id=str(payload["run_id"]),
            task_id=str(payload["task_id"]),
            map_index=int(payload["map_index"]),
            try_number=int(payload["try_number"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise jwt.InvalidTokenError(f"credential does not name a task instance: {error}") from None
    if payload.get("sub") != claims.ti_id:
        raise jwt.InvalidTokenError("credential's subject is not its task instance")
    return claims, valid_until
