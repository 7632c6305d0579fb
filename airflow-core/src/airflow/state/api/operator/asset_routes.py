"""
Asset state, as operators see it: the assets that hold state, and each one's keys. Access is
Airflow's for assets (``requires_access_asset``: GET read, PUT write, DELETE delete).

As for task state, every keyed operation exists with the key in the path and, for any key, with it
as the ``key`` query parameter (``stateEntry?key=``); increments likewise (``stateIncrement``).
Every key records who last wrote it; operators' writes here record ``api``.
"""

from __future__ import annotations

from airflow.state import manage
from airflow.state.api.errors import OPERATOR_DOCUMENTED
from airflow.state.api.operator.auth import OperatorUser, asset_state_access, may_access_asset
from airflow.state.api.operator.datamodels import (
    INCREMENT_BODY,
    WRITE_BODY,
    AssetResponse,
    AssetStateEntriesResponse,
    AssetStateEntryResponse,
    AssetsWithStateResponse,
    AssetWithState,
    StateIncrementResponse,
    StateWriteResponse,
)
from airflow.state.api.operator.params import (
    AssetId,
    IfVersion,
    IncrementBody,
    KeyPrefix,
    Limit,
    NewWrite,
    Offset,
    PathKey,
    QueryKey,
    WriteRequest,
)
from airflow.state.api.operator.refusals import (
    INCREMENT_DOCUMENTED,
    WRITE_DOCUMENTED,
    refusing_backend_errors,
)
from airflow_shared.state import API_WRITER, AssetScope
from fastapi import APIRouter, Response, status

router = APIRouter(tags=["Asset state"], responses=OPERATOR_DOCUMENTED)

ASSETS = "/assets"
ASSET_STATE = "/assets/{asset_id}/state"
ASSET_STATE_KEY = ASSET_STATE + "/{key:path}"
ASSET_STATE_ENTRY = "/assets/{asset_id}/stateEntry"
ASSET_STATE_INCREMENT = "/assets/{asset_id}/stateIncrement"
ASSET_STATE_INCREMENT_KEY = ASSET_STATE_INCREMENT + "/{key:path}"

READ, WRITE, DELETE = asset_state_access("GET"), asset_state_access("PUT"), asset_state_access("DELETE")


def _asset(asset_id: int) -> manage.AssetInfo:
    """The asset, or 404 ``asset_not_found``: a typo never reads or writes an empty scope."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return manage.find_asset(session, asset_id=asset_id)


def _scope(asset_id: int) -> AssetScope:
    return AssetScope(_asset(asset_id).asset_id)


def _described(asset: manage.AssetInfo) -> AssetResponse:
    return AssetResponse(asset_id=asset.asset_id, name=asset.name, uri=asset.uri, group=asset.group)


@router.get(ASSETS, dependencies=[READ], summary="Assets that hold state")
def list_assets_with_state(
    user: OperatorUser, limit: Limit = 100, offset: Offset = 0
) -> AssetsWithStateResponse:
    """
    A page of the assets whose state holds at least one key, with how many, sorted by name and
    URI. Only assets the caller may read are listed (auth managers may decide per asset).
    """
    from airflow.utils.session import create_session

    with create_session() as session:
        found = manage.assets_with_state(session)
    readable = [(asset, count) for asset, count in found if may_access_asset(user, "GET", asset.asset_id)]
    page = readable[offset : offset + limit]
    return AssetsWithStateResponse(
        assets=[AssetWithState(**_described(asset).model_dump(), key_count=count) for asset, count in page],
        total_entries=len(readable),
        can_edit=may_access_asset(user, "PUT"),
    )


@router.get(ASSET_STATE, dependencies=[READ], summary="An asset's state")
def list_asset_state(
    asset_id: AssetId,
    user: OperatorUser,
    key_prefix: KeyPrefix,
    limit: Limit = 100,
    offset: Offset = 0,
) -> AssetStateEntriesResponse:
    """
    A page of the asset's keys with their values, sorted by key (code point), optionally only those
    starting with `key_prefix`, and the asset itself. 404 `asset_not_found` for an unknown asset.
    """
    asset = _asset(asset_id)
    entries, total = manage.entries(
        AssetScope(asset.asset_id), key_prefix=key_prefix, offset=offset, limit=limit
    )
    return AssetStateEntriesResponse(
        entries=[AssetStateEntryResponse.of(entry) for entry in entries],
        total_entries=total,
        can_edit=may_access_asset(user, "PUT", asset.asset_id),
        can_delete=may_access_asset(user, "DELETE", asset.asset_id),
        asset=_described(asset),
    )


@router.delete(
    ASSET_STATE, dependencies=[DELETE], status_code=status.HTTP_204_NO_CONTENT, summary="Clear asset state"
)
def clear_asset_state(asset_id: AssetId) -> Response:
    """Remove every key of the asset's state."""
    manage.clear(_scope(asset_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- one key: the path form and the query form, one implementation -----------------------------


def _get(asset_id: int, key: str) -> AssetStateEntryResponse:
    return AssetStateEntryResponse.of(manage.entry(_scope(asset_id), key))


def _put(asset_id: int, key: str, write: WriteRequest, if_version: int | None) -> StateWriteResponse:
    scope = _scope(asset_id)
    with refusing_backend_errors():
        written = manage.put(scope, key, write.text, ttl=write.ttl, if_version=if_version, writer=API_WRITER)
    return StateWriteResponse(key=key, version=written.version, expires_at=written.expires_at)


def _increment(asset_id: int, key: str, body: IncrementBody) -> StateIncrementResponse:
    scope = _scope(asset_id)
    with refusing_backend_errors():
        added = manage.increment(scope, key, body.by, ttl=body.ttl, writer=API_WRITER)
    return StateIncrementResponse(key=key, value=added.value, expires_at=added.expires_at)


def _delete(asset_id: int, key: str) -> Response:
    manage.delete(_scope(asset_id), key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


_GET_DESCRIPTION = "One key of the asset's state. 404 `key_not_found` when it holds no such key."
_PUT_DESCRIPTION = (
    'Store `{"value": <any JSON but null>, "ttl": <seconds> | "never"}` under the key, as an operator '
    "(`updated_by` becomes `api`); `ttl` left out: never expires. With `if_version=n`, only if the "
    "key is still at version n (0: only if absent), else 409 `version_conflict` with "
    "`stored_version`. Returns the key's new version and expiry. 413 `body_too_large`, 422 "
    "`invalid_value` past the size limit, 501 `unsupported` for a ttl or `if_version` the "
    "configured backend cannot honour."
)
_INCREMENT_DESCRIPTION = (
    'Add `{"by": <integer, default 1>}` to the integer stored under the key (absent: 0) in one '
    "atomic step, so concurrent increments never lose one another, and return the result. Needs "
    "the permission of a write; `ttl` as for a write (left out: never expires). 422 "
    "`invalid_value` when the key holds something other than an integer or the sum leaves 64 bits "
    "(nothing is written); 501 `unsupported` when the configured backend cannot increment."
)
_DELETE_DESCRIPTION = "Remove the key from the asset's state; not an error when it is not there."
_PATH_FORM = (
    " Keys with an empty, `.` or `..` path segment are refused (422 `invalid_key`): use `stateEntry?key=`."
)
_QUERY_FORM = " The key is the `key` query parameter, so any key can be named."


@router.get(
    ASSET_STATE_KEY,
    dependencies=[READ],
    summary="Get an asset state key",
    description=_GET_DESCRIPTION + _PATH_FORM,
)
def get_asset_state_key(asset_id: AssetId, key: PathKey) -> AssetStateEntryResponse:
    return _get(asset_id, key)


@router.put(
    ASSET_STATE_KEY,
    dependencies=[WRITE],
    openapi_extra=WRITE_BODY,
    responses=WRITE_DOCUMENTED,
    summary="Set an asset state key",
    description=_PUT_DESCRIPTION + _PATH_FORM,
)
def put_asset_state_key(
    asset_id: AssetId, key: PathKey, write: NewWrite, if_version: IfVersion = None
) -> StateWriteResponse:
    return _put(asset_id, key, write, if_version)


@router.delete(
    ASSET_STATE_KEY,
    dependencies=[DELETE],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete an asset state key",
    description=_DELETE_DESCRIPTION + _PATH_FORM,
)
def delete_asset_state_key(asset_id: AssetId, key: PathKey) -> Response:
    return _delete(asset_id, key)


@router.get(
    ASSET_STATE_ENTRY,
    dependencies=[READ],
    summary="Get an asset state key (key as query parameter)",
    description=_GET_DESCRIPTION + _QUERY_FORM,
)
def get_asset_state_entry(asset_id: AssetId, key: QueryKey) -> AssetStateEntryResponse:
    return _get(asset_id, key)


@router.put(
    ASSET_STATE_ENTRY,
    dependencies=[WRITE],
    openapi_extra=WRITE_BODY,
    responses=WRITE_DOCUMENTED,
    summary="Set an asset state key (key as query parameter)",
    description=_PUT_DESCRIPTION + _QUERY_FORM,
)
def put_asset_state_entry(
    asset_id: AssetId, key: QueryKey, write: NewWrite, if_version: IfVersion = None
) -> StateWriteResponse:
    return _put(asset_id, key, write, if_version)


@router.delete(
    ASSET_STATE_ENTRY,
    dependencies=[DELETE],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete an asset state key (key as query parameter)",
    description=_DELETE_DESCRIPTION + _QUERY_FORM,
)
def delete_asset_state_entry(asset_id: AssetId, key: QueryKey) -> Response:
    return _delete(asset_id, key)


@router.post(
    ASSET_STATE_INCREMENT_KEY,
    dependencies=[WRITE],
    openapi_extra=INCREMENT_BODY,
    responses=INCREMENT_DOCUMENTED,
    summary="Increment an asset state key",
    description=_INCREMENT_DESCRIPTION + _PATH_FORM.replace("stateEntry", "stateIncrement"),
)
def increment_asset_state_key(asset_id: AssetId, key: PathKey, body: IncrementBody) -> StateIncrementResponse:
    return _increment(asset_id, key, body)


@router.post(
    ASSET_STATE_INCREMENT,
    dependencies=[WRITE],
    openapi_extra=INCREMENT_BODY,
    responses=INCREMENT_DOCUMENTED,
    summary="Increment an asset state key (key as query parameter)",
    description=_INCREMENT_DESCRIPTION + _QUERY_FORM,
)
def increment_asset_state_entry(
    asset_id: AssetId, key: QueryKey, body: IncrementBody
) -> StateIncrementResponse:
    return _increment(asset_id, key, body)
