"""
Who may do what with the operators' REST API: Airflow's own ``get_user``, ``requires_access_dag``
and ``requires_access_asset`` decide, as for Airflow's REST API under any auth manager; their bare
string refusals are reshaped here, where it is known which permission a refusal was about, into
``{"detail": {"reason", "message"}}`` naming that permission.

``AuthManagerDep`` is never used: it reads ``request.app.state``, which belongs to Airflow's root
app, not to this mounted sub-app; ``get_auth_manager()`` is the same process-wide instance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import (
    AssetDetails,
    DagAccessEntity,
    DagDetails,
)
from airflow.api_fastapi.core_api.security import (
    bearer_scheme,
    get_user,
    oauth2_scheme,
    requires_access_asset,
    requires_access_dag,
)
from airflow.models.dag import DagModel
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from airflow_task_state.api.errors import forbidden, unauthorized, unprocessable
from airflow_task_state.protocol import Reason

Method = Literal["GET", "PUT", "DELETE"]

# What each method does to state, and the permission it needs, for the messages of refusals.
_DOING = {"GET": "reading", "PUT": "editing", "DELETE": "deleting"}
_PERMISSION = {"GET": "read", "PUT": "edit", "DELETE": "delete"}
_LOG_IN = (
    "log in again, or send a new Airflow API token (POST /auth/token) as 'Authorization: Bearer <token>'"
)


async def operator_user(
    request: Request,
    oauth_token: Annotated[str | None, Depends(oauth2_scheme)],
    bearer_credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> BaseUser:
    """The user, by Airflow's ``get_user`` (its 401 for no or an expired token, 403 for an invalid one)."""
    try:
        return await get_user(request, oauth_token, bearer_credentials)
    except HTTPException as error:
        # Airflow answers 401 for no token at all ("Not authenticated") and for an expired one.
        if error.status_code == status.HTTP_401_UNAUTHORIZED:
            raise unauthorized(f"{error.detail}: {_LOG_IN}", Reason.UNAUTHENTICATED) from None
        if error.status_code == status.HTTP_403_FORBIDDEN:
            raise forbidden(f"the Airflow token is not valid ({error.detail}): {_LOG_IN}") from None
        raise


OperatorUser = Annotated[BaseUser, Depends(operator_user)]


def _access(airflow_check: Any, refused: Callable[[dict[str, Any]], str]) -> Any:
    """A dependency running one of Airflow's access checks; its 403 says *refused* of the path parameters."""

    def check(request: Request, user: OperatorUser) -> None:
        try:
            airflow_check(request, user)
        except HTTPException as error:
            if error.status_code == status.HTTP_403_FORBIDDEN:
                raise forbidden(refused(request.path_params)) from None
            raise

    return Depends(check)


def task_state_access(method: Method) -> Any:
    """The caller may *method* the task instances of the path's ``dag_id``, as Airflow's own routes ask."""
    return _access(
        requires_access_dag(method, DagAccessEntity.TASK_INSTANCE),
        lambda path: (
            f"{_DOING[method]} task state of DAG {path.get('dag_id')!r} needs "
            f"{_PERMISSION[method]} permission on its task instances"
        ),
    )


def asset_state_access(method: Method) -> Any:
    """The caller may *method* the path's ``asset_id`` (``requires_access_asset``), spelled plainly."""
    airflow_check = requires_access_asset(method)

    def check_plain_id(request: Request, user: BaseUser) -> None:
        # Airflow's check asks the auth manager about the id as the URL spells it, and the route
        # then reads it as a number: "01", "+1" or "1.0" would reach asset 1 with the check asking
        # about another name. Only the plain decimal spelling passes, so both name the same asset.
        spelled = request.path_params.get("asset_id")
        if spelled is not None and not _plain_decimal(spelled):
            raise unprocessable(
                Reason.INVALID_REQUEST,
                f"asset id {spelled!r} is not written as a plain number (digits, no leading zero, sign "
                "or decimal point): write it as the asset list shows it",
            )
        airflow_check(request, user)

    return _access(
        check_plain_id,
        lambda path: (
            f"{_DOING[method]} "
            + ("asset state" if path.get("asset_id") is None else f"the state of asset {path['asset_id']}")
            + f" needs {_PERMISSION[method]} permission on assets"
        ),
    )


def _plain_decimal(text: str) -> bool:
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


# --- what the caller may do, for the UI to offer only that ------------------------------------


def task_state_permissions(dag_id: str, user: OperatorUser) -> dict[str, Any]:
    """Whether *user* may PUT and DELETE the task instances of *dag_id* (also a route dependency)."""
    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))

    def may(method: Method) -> bool:
        return get_auth_manager().is_authorized_dag(
            method=method, access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=user
        )

    return {"can_edit": may("PUT"), "can_delete": may("DELETE")}


def may_access_asset(user: BaseUser, method: Method, asset_id: int | None = None) -> bool:
    """Whether *user* may *method* the state of *asset_id* (of assets in general when None)."""
    details = AssetDetails(id=None if asset_id is None else str(asset_id))
    return get_auth_manager().is_authorized_asset(method=method, details=details, user=user)
