"""
Routes: one task instance's keys, and the state of an asset the task declares.

A key is never part of the path (see :mod:`airflow.state.protocol`): it is the ``key`` query
parameter of the ``.../value`` routes, read strictly from the raw query string.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from airflow.state import codec
from airflow.state.api.credentials import TaskInstanceClaims
from airflow.state.api.datamodels import VALUE_BODY_SCHEMA, StateKeysResponse, StateValueResponse
from airflow.state.api.errors import DOCUMENTED, refusal, unprocessable
from airflow.state.api.security import Claims, check_task_instance, declared_asset_id
from airflow.state.protocol import (
    ASSET_KEYS_PATH,
    ASSET_VALUE_PATH,
    KEY_PARAMETER,
    TASK_KEYS_PATH,
    TASK_VALUE_PATH,
    Reason,
)
from airflow_shared.state import AssetScope, StateScope, validate_key
from fastapi import APIRouter, Depends, Query, Request, Response, status

router = APIRouter()

AssetName = Annotated[str | None, Query(description="The asset's name")]
AssetUri = Annotated[str | None, Query(description="The asset's URI")]
# The JSON envelope around a value (`{"value": ...}`) and some whitespace.
BODY_ENVELOPE_BYTES = 1024
_WRITE_BODY = {"requestBody": {"required": True, "content": {"application/json": VALUE_BODY_SCHEMA}}}


def _backend():
    from airflow.state import get_state_backend

    return get_state_backend()


# --- the key: one `key` query parameter, valid UTF-8, a valid state key -------------------


def _raw_query_values(query_string: bytes, name: str) -> list[str]:
    """
    Every value of *name* in a raw query string, percent-decoded as strict UTF-8.

    Starlette's own parsing replaces invalid UTF-8 with U+FFFD, which would store a key the task
    never wrote; here it raises ``UnicodeDecodeError`` instead.
    """
    wanted = name.encode()
    found = []
    for pair in query_string.split(b"&"):
        field, _, value = pair.partition(b"=")
        if unquote_to_bytes(field.replace(b"+", b" ")) == wanted:
            found.append(unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8"))
    return found


def _valid_key(
    request: Request,
    key: Annotated[str, Query(description="The state key: any text of 1 to 512 characters, without NUL")],
) -> str:
    try:
        keys = _raw_query_values(request.scope["query_string"], KEY_PARAMETER)
    except UnicodeDecodeError as error:
        raise unprocessable(Reason.INVALID_KEY, f"state key is not valid UTF-8: {error}") from None
    if len(keys) != 1:
        raise unprocessable(Reason.INVALID_KEY, f"give the key parameter once, not {len(keys)} times")
    try:
        validate_key(keys[0])
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_KEY, error) from None
    return keys[0]


Key = Annotated[str, Depends(_valid_key)]


# --- the value: read only after the credential is verified, and never past the size limit -------


async def _body_within(request: Request, limit: int) -> bytes:
    too_large = refusal(
        status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        Reason.BODY_TOO_LARGE,
        f"request body is larger than {limit} bytes: values are limited to {limit - BODY_ENVELOPE_BYTES} "
        "bytes of compact UTF-8 JSON ([state] max_value_bytes)",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


async def _encoded_value(request: Request, claims: Claims) -> str:
    # `claims` is resolved first: an unauthenticated request is refused before its body is read.
    body = await _body_within(request, codec.max_value_bytes() + BODY_ENVELOPE_BYTES)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise unprocessable(Reason.INVALID_VALUE, f"request body is not JSON: {error}") from None
    if not isinstance(document, dict) or list(document) != ["value"]:
        raise unprocessable(Reason.INVALID_VALUE, 'request body must be {"value": <any JSON but null>}')
    try:
        return codec.encode(document["value"])
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_VALUE, error) from None


EncodedValue = Annotated[str, Depends(_encoded_value)]


# --- shared ------------------------------------------------------------------------------


def _read(scope: StateScope, key: str) -> StateValueResponse:
    stored = _backend().get(scope, key)
    if stored is None:
        raise refusal(status.HTTP_404_NOT_FOUND, Reason.KEY_NOT_FOUND, f"no state under key {key!r}")
    return StateValueResponse(key=key, value=codec.decode(stored))


def _write(scope: StateScope, key: str, text: str, try_number: int | None) -> Response:
    # Every backend is told which try writes (None for asset state); those that can, record it.
    _backend().set_by_try(scope, key, text, try_number=try_number)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such key (`key_not_found`)"}}


# --- task instance state -----------------------------------------------------------------


@router.get(TASK_KEYS_PATH, responses=DOCUMENTED)
def list_task_keys(task_instance_id: str, claims: Claims) -> StateKeysResponse:
    """The keys of the calling task instance's state (its own map index), sorted."""
    scope = check_task_instance(claims, write=False, path_ti_id=task_instance_id)
    return StateKeysResponse(keys=_backend().keys(scope))


@router.delete(TASK_KEYS_PATH, status_code=204, responses=DOCUMENTED)
def clear_task_state(task_instance_id: str, claims: Claims) -> None:
    """Remove every key of the calling task instance's state (its own map index)."""
    _backend().clear(check_task_instance(claims, write=True, path_ti_id=task_instance_id))


@router.get(TASK_VALUE_PATH, responses={**DOCUMENTED, **_NOT_FOUND})
def get_task_state(task_instance_id: str, claims: Claims, key: Key) -> StateValueResponse:
    """The value stored under `key` in the calling task instance's state."""
    return _read(check_task_instance(claims, write=False, path_ti_id=task_instance_id), key)


@router.put(TASK_VALUE_PATH, status_code=204, responses=DOCUMENTED, openapi_extra=_WRITE_BODY)
def set_task_state(task_instance_id: str, claims: Claims, key: Key, text: EncodedValue) -> Response:
    """Store a value under `key`; only the running try the credential names may write."""
    scope = check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    return _write(scope, key, text, try_number=claims.try_number)


@router.delete(TASK_VALUE_PATH, status_code=204, responses=DOCUMENTED)
def delete_task_state(task_instance_id: str, claims: Claims, key: Key) -> None:
    """Remove `key`; removing a key that is not there is not an error."""
    _backend().delete(check_task_instance(claims, write=True, path_ti_id=task_instance_id), key)


# --- asset state -------------------------------------------------------------------------


def _asset_scope(claims: TaskInstanceClaims, name: str | None, uri: str | None, *, write: bool) -> AssetScope:
    check_task_instance(claims, write=write)
    return AssetScope(declared_asset_id(claims, name, uri, write=write))


_ASSET_ERRORS = {**DOCUMENTED, 404: {"description": "No such asset (`asset_not_found`) or key"}}


@router.get(ASSET_KEYS_PATH, responses=_ASSET_ERRORS)
def list_asset_keys(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> StateKeysResponse:
    """The keys of an asset's state; the task must declare the asset as an inlet or an outlet."""
    return StateKeysResponse(keys=_backend().keys(_asset_scope(claims, name, uri, write=False)))


@router.delete(ASSET_KEYS_PATH, status_code=204, responses=_ASSET_ERRORS)
def clear_asset_state(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> None:
    """Remove every key of an asset's state; only a running task with the asset as an outlet may."""
    _backend().clear(_asset_scope(claims, name, uri, write=True))


@router.get(ASSET_VALUE_PATH, responses=_ASSET_ERRORS)
def get_asset_state(
    claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None
) -> StateValueResponse:
    """The value stored under `key` in an asset's state."""
    return _read(_asset_scope(claims, name, uri, write=False), key)


@router.put(ASSET_VALUE_PATH, status_code=204, responses=_ASSET_ERRORS, openapi_extra=_WRITE_BODY)
def set_asset_state(
    claims: Claims, key: Key, text: EncodedValue, name: AssetName = None, uri: AssetUri = None
) -> Response:
    """Store a value under `key` in an asset's state; the running task must have it as an outlet."""
    return _write(_asset_scope(claims, name, uri, write=True), key, text, try_number=None)


@router.delete(ASSET_VALUE_PATH, status_code=204, responses=_ASSET_ERRORS)
def delete_asset_state(claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None) -> None:
    """Remove `key` from an asset's state; the running task must have the asset as an outlet."""
    _backend().delete(_asset_scope(claims, name, uri, write=True), key)
