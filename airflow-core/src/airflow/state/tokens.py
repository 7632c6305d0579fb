"""
Short-lived tokens that name one task instance, signed with ``[state] api_secret``
(``airflow.state.config.api_secret()``).

A task process mints a token for itself on each request; the API server verifies it and scopes
every operation to the task instance it names. The secret is dedicated to task state: the
``[api_auth] jwt_secret`` must stay on the scheduler and API server.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import jwt

AUDIENCE = "airflow-task-state"
ALGORITHM = "HS512"
LIFETIME_SECONDS = 60
# Workers' and API servers' clocks differ a little.
CLOCK_LEEWAY_SECONDS = 30


@dataclass(frozen=True)
class TaskInstanceClaims:
    """The task instance a token speaks for."""

    ti_id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int


def mint(claims: TaskInstanceClaims, secret: str, now: float | None = None) -> str:
    issued = int(time.time() if now is None else now)
    payload = {**asdict(claims), "aud": AUDIENCE, "iat": issued, "exp": issued + LIFETIME_SECONDS}
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def verify(token: str, secret: str) -> TaskInstanceClaims:
    """Return the claims of a valid token; raise ``jwt.InvalidTokenError`` otherwise."""
    payload = jwt.decode(
        token,
        secret,
        algorithms=[ALGORITHM],
        audience=AUDIENCE,
        leeway=CLOCK_LEEWAY_SECONDS,
        options={"require": ["exp", "iat", "aud"]},
    )
    try:
        return TaskInstanceClaims(
            ti_id=str(payload["ti_id"]),
            dag_id=str(payload["dag_id"]),
            run_id=str(payload["run_id"]),
            task_id=str(payload["task_id"]),
            map_index=int(payload["map_index"]),
            try_number=int(payload["try_number"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise jwt.InvalidTokenError(f"token does not name a task instance: {error}") from None
