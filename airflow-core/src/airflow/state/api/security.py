"""
Who is calling: the task instance named by a verified credential, checked against the database; or,
on the first request of a task process, by the try's proof (see :mod:`airflow.state.api.handshake`),
which that request's answer exchanges for a credential.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import astuple
from functools import cache
from typing import Annotated, Any
from uuid import UUID

import jwt
from airflow.models.asset import AssetModel, TaskInletAssetReference, TaskOutletAssetReference
from airflow.models.dagrun import DagRun
from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.models.taskinstance import TaskInstance
from airflow.state.airflow_db.clears import (
    boundary_at_first_touch,
    choice_of,
    decoded,
    highest_success_before_current_try,
    undecoded,
)
from airflow.state.airflow_db.engine import execute
from airflow.state.airflow_db.run_identity import dag_run_uid
from airflow.state.api.credentials import (
    CREDENTIAL_LIFETIME_SECONDS,
    TaskInstanceClaims,
    issue_credential,
    verify_credential_until,
)
from airflow.state.api.errors import forbidden, refusal, unauthorized, unprocessable
from airflow.state.api.signing_keys import signing_key, verification_keys
from airflow.state.configured_backend import get_state_backend
from airflow.state.protocol import (
    CREDENTIAL_EXPIRES_HEADER,
    CREDENTIAL_HEADER,
    CREDENTIALS_PATH,
    PROOF_FIELD,
    PROOF_SCHEME,
    Reason,
    proof,
)
from airflow.utils.session import create_session
from airflow.utils.state import TaskInstanceState
from airflow_shared.state import TaskScope
from fastapi import Depends, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Select, and_, bindparam, exists, select

log = logging.getLogger(__name__)

_bearer = HTTPBearer(
    auto_error=False,
    description=f"A task credential, obtained through the handshake that ends at {CREDENTIALS_PATH}",
)


# Where a request's answer finds the credential its proof earned (the request's state, set below).
ISSUED_CREDENTIAL = "airflow_task_state_issued_credential"


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
        claims = await run_in_threadpool(claims_for_proof, ti_id, verifier)
        credential = issue_credential(claims, signing_key())
        request.state.airflow_task_state_issued_credential = [
            (CREDENTIAL_HEADER.lower().encode(), credential.encode()),
            (CREDENTIAL_EXPIRES_HEADER.lower().encode(), str(CREDENTIAL_LIFETIME_SECONDS).encode()),
        ]
        return claims
    try:
        return _verified_claims(credentials.credentials)
    except jwt.ExpiredSignatureError:
        raise unauthorized("credential expired") from None
    except jwt.InvalidTokenError as error:
        raise unauthorized(f"invalid credential ({error})") from None


# A task process sends one credential with every request for minutes: its signature is checked
# once per API server process and set of keys, its lifetime on every request.
_verified: dict[str, tuple[TaskInstanceClaims, float]] = {}
_verified_with: tuple[bytes, ...] = ()
_VERIFIED_KEPT = 4096


def _verified_claims(token: str) -> TaskInstanceClaims:
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


@cache
def _proof_row() -> Select[Any]:
    """_task_instance_row with the rendered fields, max_tries and the highest earlier try in success."""
    ti, rendered = TaskInstance.__table__, RenderedTaskInstanceFields.__table__
    same_task_instance = and_(
        *(rendered.c[column] == ti.c[column] for column in ("dag_id", "run_id", "task_id", "map_index"))
    )
    return (
        _task_instance_row()
        .outerjoin_from(ti, rendered, same_task_instance)
        .add_columns(
            undecoded(rendered.c.rendered_fields), ti.c.max_tries, highest_success_before_current_try(ti)
        )
    )


def claims_for_proof(ti_id: str, verifier: str) -> TaskInstanceClaims:
    """
    The try the proof of *verifier* speaks for: 403 unless the task instance *ti_id* is running and
    its rendered fields hold that proof (only the supervisor of its try can put it there).
    """
    try:
        UUID(ti_id)
    except ValueError:
        raise unauthorized(f"a {PROOF_SCHEME} names a task instance id, not {ti_id[:40]!r}") from None
    if not 32 <= len(verifier) <= 256:
        raise unauthorized(f"a {PROOF_SCHEME}'s verifier has 32 to 256 characters")
    row = _row(_proof_row(), ti_id)
    dag_id, run_id, task_id, map_index, state, try_number = row[:6]
    # A process left behind by a finished try keeps what it holds (a credential lives its ten
    # minutes), but gets nothing new.
    _refuse_unless_running(ti_id, state, "obtain a credential")
    rendered = decoded(row[-3]) or {}  # see _proof_row
    found = rendered.get(PROOF_FIELD)
    if not isinstance(found, str) or not hmac.compare_digest(found, proof(ti_id, verifier)):
        raise forbidden(
            f"the proof of this verifier is not among the rendered fields of task instance {ti_id}: only "
            "the supervisor of that task instance's running try can put it there, through Airflow's "
            "Execution API",
            Reason.PROOF_NOT_FOUND,
        )
    claims = TaskInstanceClaims(ti_id, dag_id, run_id, task_id, map_index, try_number)
    scope = _scope_of(row)
    # Before the credential exists: no request of this process reads what a clear left behind.
    _discard_what_a_clear_left(scope, row, rendered)
    # Checked as check_task_instance checks a read: the request this proof came with need not ask again.
    _remember_check(claims, scope)
    return claims


def discard_for_in_process_try(ti_id: str, chosen: dict[str, str | None]) -> None:
    """
    What a proof exchange discards, for a try whose credential needs no proof: under ``dag.test()``
    the task runs in this very process. *chosen*: the task's choice, as the handshake records it.
    """
    rows = execute(_proof_row(), {"ti_id": UUID(ti_id)}).rows
    if rows:  # else the try's own requests are refused, each saying why
        _discard_what_a_clear_left(_scope_of(rows[0]), rows[0], chosen)


def _discard_what_a_clear_left(scope: TaskScope, row: Any, chosen: Any) -> None:
    """
    The first touch of state by each process of a try (*row*: its _proof_row): remove the keys that
    earlier tries wrote when the task instance was cleared since, as the task chose (*chosen*, or
    among the row's rendered fields; see airflow.state.airflow_db.clears). Every process of the try
    does it (deferral resumes, reschedule pokes): keys written by this try are never among them, so
    the second time removes nothing. A failure refuses the credential: the try must not read a job
    id that its clear meant to forget.
    """
    *_, rendered, max_tries, succeeded_try = row
    try_number = row[5]
    choice = choice_of(chosen or rendered, f"{scope.dag_id}.{scope.task_id}")
    boundary = boundary_at_first_touch(scope, choice, try_number, max_tries, succeeded_try)
    if boundary is None:
        return
    removed = get_state_backend().discard_written_through_try(scope, boundary)
    if removed:
        log.info(
            "Discarded %d key(s) of task instance %s/%s/%s[%d] written by tries up to %d: it was cleared "
            "since (keep_task_state=%s); try %d starts afresh",
            removed,
            *astuple(scope)[:4],  # dag_id, run_id, task_id, map_index
            boundary,
            choice.value,
            try_number,
        )


@cache
def _task_instance_row() -> Select[Any]:
    ti, run = TaskInstance.__table__, DagRun.__table__
    return (
        select(
            ti.c.dag_id,
            ti.c.run_id,
            ti.c.task_id,
            ti.c.map_index,
            ti.c.state,
            ti.c.try_number,
            run.c.id,
            run.c.created_at,
            run.c.run_after,
        )
        .join_from(ti, run, and_(run.c.dag_id == ti.c.dag_id, run.c.run_id == ti.c.run_id))
        .where(ti.c.id == bindparam("ti_id"))
    )


# A read trusts a check of its task instance made this recently (by a read or a write): a try
# reads its own state, which every try of the task instance shares, and one whose task instance has
# just been superseded or deleted can read it this much longer. Writes are checked every time.
READ_CHECK_SECONDS = 1.0
_recently_checked: dict[TaskInstanceClaims, tuple[float, TaskScope]] = {}


def check_task_instance(
    claims: TaskInstanceClaims, *, write: bool, path_ti_id: str | None = None, succeeded: bool = False
) -> TaskScope:
    """
    The credential's task instance's scope (see _scope_of), refused unless it is still at the
    credential's try (each try has a task instance id of its own) and, for writes, running: an ended
    try or a zombie must not overwrite state. With *succeeded*, the try must have succeeded instead.
    """
    if path_ti_id is not None and path_ti_id != claims.ti_id:
        raise forbidden(
            f"a credential for task instance {claims.ti_id} cannot access task instance {path_ti_id}"
        )
    if not write and not succeeded:
        recent = _recently_checked.get(claims)
        if recent is not None and time.monotonic() < recent[0]:
            return recent[1]
    row = _row(_task_instance_row(), claims.ti_id)
    dag_id, run_id, task_id, map_index, state, try_number = row[:6]
    if (dag_id, run_id, task_id, map_index, try_number) != astuple(claims)[1:]:  # all but ti_id
        raise forbidden(f"credential does not match task instance {claims.ti_id} and its try {try_number}")
    if write:
        _refuse_unless_running(claims.ti_id, state, "write its state")
    if succeeded and state != TaskInstanceState.SUCCESS:
        raise forbidden(
            f"task instance {claims.ti_id} is {state}, not success: only a try that succeeded may "
            "clear its state on success or commit its staged writes (a running task writes its state "
            "directly, e.g. task_state.clear() or task_state.set())"
        )
    scope = _scope_of(row)
    _remember_check(claims, scope)
    return scope


def _row(query: Select[Any], ti_id: str) -> Any:
    # One statement on the state engine (autocommit, no pre-ping): this runs on every request.
    rows = execute(query, {"ti_id": UUID(ti_id)}).rows
    if not rows:
        raise forbidden(
            f"task instance {ti_id} does not exist: its try has ended and a newer one started, "
            "or its dag run was deleted"
        )
    return rows[0]


def _refuse_unless_running(ti_id: str, state: str | None, doing: str) -> None:
    if state != TaskInstanceState.RUNNING:
        raise forbidden(
            f"task instance {ti_id} is {state}: only a running try may {doing}", Reason.NOT_RUNNING
        )


def _scope_of(row: Any) -> TaskScope:
    """A _task_instance_row's scope: a run deleted and created again under its run_id starts empty."""
    dag_id, run_id, task_id, map_index, _, _, dag_run_id, created_at, run_after = row[:9]
    return TaskScope(
        dag_id, run_id, task_id, map_index, dag_run_uid=dag_run_uid(dag_run_id, created_at, run_after)
    )


def _remember_check(claims: TaskInstanceClaims, scope: TaskScope) -> None:
    if len(_recently_checked) >= _VERIFIED_KEPT:
        _recently_checked.clear()
    _recently_checked[claims] = (time.monotonic() + READ_CHECK_SECONDS, scope)


def declared_asset_id(claims: TaskInstanceClaims, name: str | None, uri: str | None, *, write: bool) -> int:
    """The asset named by *name*/*uri*, declared by the task as an outlet (or, to read, an inlet)."""
    if not name and not uri:
        raise unprocessable(Reason.INVALID_REQUEST, "give the asset's name or uri")

    def referenced_by_this_task(reference: Any) -> Any:
        return exists().where(
            reference.asset_id == AssetModel.id,
            reference.dag_id == claims.dag_id,
            reference.task_id == claims.task_id,
        )

    # One round trip: the matching assets, each with how the task declares it.
    query = select(
        AssetModel.id,
        referenced_by_this_task(TaskInletAssetReference),
        referenced_by_this_task(TaskOutletAssetReference),
    )
    if name:
        query = query.where(AssetModel.name == name)
    if uri:
        query = query.where(AssetModel.uri == uri)
    described = " and ".join(f"{field}={value!r}" for field, value in (("name", name), ("uri", uri)) if value)
    with create_session() as session:
        matches = session.execute(query).all()
    if len(matches) != 1:
        raise refusal(
            status.HTTP_404_NOT_FOUND,
            Reason.ASSET_NOT_FOUND,
            f"no asset with {described}" if not matches else f"{described} names several assets",
        )
    ((asset_id, is_inlet, is_outlet),) = matches
    if is_outlet or (is_inlet and not write):
        return asset_id
    how = (
        "declares asset {} as an inlet only: it may read the asset's state, and writing it needs the "
        "asset in the task's outlets"
        if is_inlet
        else "does not declare asset {} as an inlet or outlet"
    )
    raise forbidden(
        f"task {claims.dag_id}.{claims.task_id} {how.format(described)}", Reason.ASSET_NOT_DECLARED
    )


class IssuedCredentialHeaders:
    """
    ASGI middleware: the answer to a proof's request carries the credential it earned, whatever the
    route answers (a 404 too: a task's first call is often the read of a job id it has not stored yet).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def with_credential(message: dict[str, Any]) -> None:
            issued = scope.get("state", {}).get(ISSUED_CREDENTIAL)
            if message["type"] == "http.response.start" and issued:
                message = {**message, "headers": [*message.get("headers", []), *issued]}
            await send(message)

        await self.app(scope, receive, with_credential)
