"""Who is calling: the task instance named by a verified token, checked against the database."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any
from uuid import UUID

import jwt
from airflow.state._engine import execute
from airflow.state.tokens import MissingSecretError, TaskInstanceClaims, api_secret, verify
from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Select, bindparam, exists, or_, select

_bearer = HTTPBearer(auto_error=False, description="A task-state token signed with [state] api_secret")


def token_claims(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TaskInstanceClaims:
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "missing bearer token", {"WWW-Authenticate": "Bearer"}
        )
    try:
        secret = api_secret()
    except MissingSecretError as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"API server: {error}") from None
    try:
        return verify(credentials.credentials, secret)
    except jwt.ExpiredSignatureError:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "token expired", {"WWW-Authenticate": "Bearer"}
        ) from None
    except jwt.InvalidTokenError as error:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"invalid token ({error}); do the worker and the API server share [state] api_secret?",
            {"WWW-Authenticate": "Bearer"},
        ) from None


Claims = Annotated[TaskInstanceClaims, Depends(token_claims)]


def _forbidden(message: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, message)


@cache
def _task_instance_row() -> Select[Any]:
    from airflow.models.taskinstance import TaskInstance

    ti = TaskInstance.__table__
    return select(ti.c.dag_id, ti.c.run_id, ti.c.task_id, ti.c.map_index, ti.c.state, ti.c.try_number).where(
        ti.c.id == bindparam("ti_id")
    )


def check_task_instance(claims: TaskInstanceClaims, *, write: bool, path_ti_id: str | None = None) -> None:
    """
    Refuse unless the token's task instance exists as named; for writes, unless it is running
    the try the token was minted for (a stale try, or a zombie, must not overwrite state).
    """
    from airflow.utils.state import TaskInstanceState

    if path_ti_id is not None and path_ti_id != claims.ti_id:
        raise _forbidden(f"a token for task instance {claims.ti_id} cannot access task instance {path_ti_id}")
    try:
        ti_id = UUID(claims.ti_id)
    except ValueError:
        raise _forbidden(f"task instance id {claims.ti_id!r} is not a UUID") from None
    # One statement on the state engine (autocommit, no pre-ping): this runs on every request.
    rows = execute(_task_instance_row(), {"ti_id": ti_id}).rows
    if not rows:
        raise _forbidden(f"task instance {claims.ti_id} does not exist")
    dag_id, run_id, task_id, map_index, state, try_number = rows[0]
    if (dag_id, run_id, task_id, map_index) != (
        claims.dag_id,
        claims.run_id,
        claims.task_id,
        claims.map_index,
    ):
        raise _forbidden(f"token does not match task instance {claims.ti_id}")
    if write and (state != TaskInstanceState.RUNNING or try_number != claims.try_number):
        raise _forbidden(
            f"task instance {claims.ti_id} is {state} at try {try_number}; "
            f"only a running try {claims.try_number} may write its state"
        )


def declared_asset_id(claims: TaskInstanceClaims, name: str | None, uri: str | None) -> int:
    """The id of the asset named by *name*/*uri*, if the task declares it as an inlet or outlet."""
    from airflow.models.asset import AssetModel, TaskInletAssetReference, TaskOutletAssetReference
    from airflow.utils.session import create_session

    if not name and not uri:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "give the asset's name or uri")

    def referenced_by_this_task(reference: Any) -> Any:
        return exists().where(
            reference.asset_id == AssetModel.id,
            reference.dag_id == claims.dag_id,
            reference.task_id == claims.task_id,
        )

    # One round trip: the matching assets, each with whether the task declares it.
    declared = or_(*(referenced_by_this_task(r) for r in (TaskInletAssetReference, TaskOutletAssetReference)))
    query = select(AssetModel.id, declared)
    if name:
        query = query.where(AssetModel.name == name)
    if uri:
        query = query.where(AssetModel.uri == uri)
    described = f"name={name!r}" if name else f"uri={uri!r}"
    with create_session() as session:
        matches = session.execute(query).all()
    if len(matches) != 1:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no asset with {described}" if not matches else f"{described} names several assets",
        )
    ((asset_id, is_declared),) = matches
    if is_declared:
        return asset_id
    raise _forbidden(
        f"task {claims.dag_id}.{claims.task_id} does not declare asset {described} as an inlet or outlet"
    )
