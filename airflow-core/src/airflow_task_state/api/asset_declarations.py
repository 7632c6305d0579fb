"""The asset a task names for its state, which it must declare: as an outlet, or to read, as an inlet."""

from __future__ import annotations

from typing import Any

from airflow.models.asset import AssetModel, TaskInletAssetReference, TaskOutletAssetReference
from airflow.utils.session import create_session
from fastapi import status
from sqlalchemy import exists, select

from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.errors import forbidden, refusal, unprocessable
from airflow_task_state.protocol import Reason


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
