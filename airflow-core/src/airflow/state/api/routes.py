"""Routes: one task instance's keys, and the state of an asset the task declares."""

from __future__ import annotations

from typing import Annotated, Any

from airflow.state import values
from airflow.state.api.models import (
    MISSING_KEY_DETAIL,
    StateKeysResponse,
    StateValueBody,
    StateValueResponse,
)
from airflow.state.api.security import Claims, check_task_instance, declared_asset_id
from airflow.state.tokens import TaskInstanceClaims
from airflow_shared.state import AssetScope, StateScope, TaskScope, validate_key
from fastapi import APIRouter, Depends, HTTPException, Query, Response, status

router = APIRouter()

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, invalid or expired token"},
    403: {"description": "The token's task instance may not access this state"},
    422: {"description": "Invalid key or value"},
}
AssetName = Annotated[str | None, Query(description="The asset's name")]
AssetUri = Annotated[str | None, Query(description="The asset's URI")]


def _backend():
    from airflow.state import get_state_backend

    return get_state_backend()


def _task_scope(claims: TaskInstanceClaims) -> TaskScope:
    return TaskScope(claims.dag_id, claims.run_id, claims.task_id, claims.map_index)


def _unprocessable(error: Exception) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(error))


# Keys and values are checked as dependencies (after the token), so bad input is refused before
# any database work.


def _valid_key(key: str) -> str:
    try:
        validate_key(key)
    except (TypeError, ValueError) as error:
        raise _unprocessable(error) from None
    return key


def _encoded_value(body: StateValueBody) -> str:
    try:
        return values.encode(body.value)
    except (TypeError, ValueError) as error:
        raise _unprocessable(error) from None


Key = Annotated[str, Depends(_valid_key)]
EncodedValue = Annotated[str, Depends(_encoded_value)]


def _read(scope: StateScope, key: str) -> StateValueResponse:
    stored = _backend().get(scope, key)
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{MISSING_KEY_DETAIL} {key!r}")
    return StateValueResponse(key=key, value=values.decode(stored))


def _write(scope: StateScope, key: str, text: str, try_number: int | None) -> Response:
    from airflow.state.metastore import MetastoreStateBackend

    backend = _backend()
    if isinstance(backend, MetastoreStateBackend):
        backend.set_by_try(scope, key, text, try_number=try_number)
    else:
        backend.set(scope, key, text)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- task instance state -----------------------------------------------------------------


@router.get("/task-instances/{task_instance_id}/keys", responses=_ERRORS)
def list_task_keys(task_instance_id: str, claims: Claims) -> StateKeysResponse:
    check_task_instance(claims, write=False, path_ti_id=task_instance_id)
    return StateKeysResponse(keys=_backend().keys(_task_scope(claims)))


@router.delete("/task-instances/{task_instance_id}/keys", status_code=204, responses=_ERRORS)
def clear_task_state(task_instance_id: str, claims: Claims) -> None:
    check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    _backend().clear(_task_scope(claims))


@router.get("/task-instances/{task_instance_id}/keys/{key:path}", responses={**_ERRORS, 404: {}})
def get_task_state(task_instance_id: str, claims: Claims, key: Key) -> StateValueResponse:
    check_task_instance(claims, write=False, path_ti_id=task_instance_id)
    return _read(_task_scope(claims), key)


@router.put("/task-instances/{task_instance_id}/keys/{key:path}", status_code=204, responses=_ERRORS)
def set_task_state(task_instance_id: str, claims: Claims, key: Key, text: EncodedValue) -> Response:
    check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    return _write(_task_scope(claims), key, text, try_number=claims.try_number)


@router.delete("/task-instances/{task_instance_id}/keys/{key:path}", status_code=204, responses=_ERRORS)
def delete_task_state(task_instance_id: str, claims: Claims, key: Key) -> None:
    check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    _backend().delete(_task_scope(claims), key)


# --- asset state -------------------------------------------------------------------------


def _asset_scope(claims: TaskInstanceClaims, name: str | None, uri: str | None, *, write: bool) -> AssetScope:
    check_task_instance(claims, write=write)
    return AssetScope(declared_asset_id(claims, name, uri))


@router.get("/assets/keys", responses={**_ERRORS, 404: {}})
def list_asset_keys(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> StateKeysResponse:
    return StateKeysResponse(keys=_backend().keys(_asset_scope(claims, name, uri, write=False)))


@router.delete("/assets/keys", status_code=204, responses={**_ERRORS, 404: {}})
def clear_asset_state(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> None:
    _backend().clear(_asset_scope(claims, name, uri, write=True))


@router.get("/assets/keys/{key:path}", responses={**_ERRORS, 404: {}})
def get_asset_state(
    claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None
) -> StateValueResponse:
    return _read(_asset_scope(claims, name, uri, write=False), key)


@router.put("/assets/keys/{key:path}", status_code=204, responses={**_ERRORS, 404: {}})
def set_asset_state(
    claims: Claims, key: Key, text: EncodedValue, name: AssetName = None, uri: AssetUri = None
) -> Response:
    return _write(_asset_scope(claims, name, uri, write=True), key, text, try_number=None)


@router.delete("/assets/keys/{key:path}", status_code=204, responses={**_ERRORS, 404: {}})
def delete_asset_state(claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None) -> None:
    _backend().delete(_asset_scope(claims, name, uri, write=True), key)
