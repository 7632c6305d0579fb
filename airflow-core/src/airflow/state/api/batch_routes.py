"""
Routes of many keys in one request: read, write or delete up to ``MAX_MANY_KEYS`` keys of the
calling task instance's state, or of an asset it declares, with one backend call.

The keys travel in the JSON body (``{"keys": [...]}``, ``{"values": {...}}``), never in the path
or the query, and the body is read only after the credential is verified and never past
``[state] max_batch_bytes``. Every key and value is checked before the backend is called: a batch
with one bad entry is refused whole, naming the entry, and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from airflow.state import codec, config, expiry
from airflow.state.api.datamodels import (
    KEYS_BODY_SCHEMA,
    VALUES_BODY_SCHEMA,
    StateValuesResponse,
    StateVersionsResponse,
)
from airflow.state.api.errors import DOCUMENTED, UNSUPPORTED_DOCUMENTED, unprocessable
from airflow.state.api.routes import (
    AssetName,
    AssetUri,
    asset_scope,
    body_ttl,
    json_object,
    state_backend,
    writer_of,
)
from airflow.state.api.security import Claims, check_task_instance
from airflow.state.protocol import (
    ASSET_VALUES_DELETE_PATH,
    ASSET_VALUES_PATH,
    ASSET_VALUES_READ_PATH,
    TASK_VALUES_DELETE_PATH,
    TASK_VALUES_PATH,
    TASK_VALUES_READ_PATH,
    TTL_FIELD,
    Reason,
)
from airflow_shared.state import StateScope, validate_batch_size, validate_key, validate_many_keys
from fastapi import APIRouter, Depends, Request

router = APIRouter()

_KEYS_SHAPE = '{"keys": [<key>, ...]}'
_VALUES_SHAPE = '{"values": {<key>: <any JSON but null>, ...}, "ttl": <seconds> | "never" (optional)}'


_BATCH_LIMIT = "batches are limited by [state] max_batch_bytes; split the batch"


async def _keys_body(request: Request, claims: Claims) -> list[str]:
    # `claims` is resolved first: an unauthenticated request is refused before its body is read.
    document = await json_object(
        request, frozenset({"keys"}), _KEYS_SHAPE, config.max_batch_bytes(), _BATCH_LIMIT
    )
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {_KEYS_SHAPE}")
    _checked_size(len(keys))
    try:
        return validate_many_keys(keys)
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_KEY, error) from None


def _checked_size(count: int) -> None:
    try:
        validate_batch_size(count, "a batch")
    except ValueError as error:
        raise unprocessable(Reason.INVALID_REQUEST, error) from None


@dataclass(frozen=True)
class _ValuesBody:
    """A batch write's body: each key's value as stored text, and the batch's ``ttl``."""

    texts: dict[str, str]
    ttl: expiry.Ttl


async def _values_body(request: Request, claims: Claims) -> _ValuesBody:
    document = await json_object(
        request, frozenset({"values", TTL_FIELD}), _VALUES_SHAPE, config.max_batch_bytes(), _BATCH_LIMIT
    )
    values = document.get("values")
    if not isinstance(values, dict):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {_VALUES_SHAPE}")
    _checked_size(len(values))
    texts = {}
    for key, value in values.items():
        try:
            validate_key(key)
        except ValueError as error:
            raise unprocessable(Reason.INVALID_KEY, error) from None
        try:
            texts[key] = codec.encode(value)
        except (TypeError, ValueError) as error:
            raise unprocessable(Reason.INVALID_VALUE, f"the value of key {key!r:.60}: {error}") from None
    return _ValuesBody(texts, body_ttl(document, _VALUES_SHAPE))


KeysBody = Annotated[list[str], Depends(_keys_body)]
ValuesBody = Annotated[_ValuesBody, Depends(_values_body)]

_KEYS_BODY = {"requestBody": {"required": True, "content": {"application/json": KEYS_BODY_SCHEMA}}}
_VALUES_BODY = {"requestBody": {"required": True, "content": {"application/json": VALUES_BODY_SCHEMA}}}
_WRITE_ERRORS = {**DOCUMENTED, **UNSUPPORTED_DOCUMENTED}
_ASSET_ERRORS = {**DOCUMENTED, 404: {"description": "No such asset (`asset_not_found`)"}}


def _read(scope: StateScope, keys: list[str]) -> StateValuesResponse:
    stored = state_backend().get_many(scope, keys)
    return StateValuesResponse(values={key: codec.decode(text) for key, text in stored.items()})


def _write(scope: StateScope, body: _ValuesBody, claims: Any) -> StateVersionsResponse:
    backend = state_backend()
    versions = backend.set_many(
        scope,
        body.texts,
        writer=writer_of(claims),
        expires_at=expiry.expires_at_for(scope, body.ttl, backend),
    )
    return StateVersionsResponse(versions=versions)


# --- task instance state -----------------------------------------------------------------


@router.post(TASK_VALUES_READ_PATH, responses=DOCUMENTED, openapi_extra=_KEYS_BODY)
def get_task_state_many(task_instance_id: str, claims: Claims, keys: KeysBody) -> StateValuesResponse:
    """The values of those of `keys` that the calling task instance's state holds (others are left out)."""
    return _read(check_task_instance(claims, write=False, path_ti_id=task_instance_id), keys)


@router.put(TASK_VALUES_PATH, responses=_WRITE_ERRORS, openapi_extra=_VALUES_BODY)
def set_task_state_many(task_instance_id: str, claims: Claims, body: ValuesBody) -> StateVersionsResponse:
    """
    Store every key-value pair of `values` and answer each key's new version; only the running try
    may write. Atomic where the backend is (the metastore and Redis backends are).
    """
    return _write(check_task_instance(claims, write=True, path_ti_id=task_instance_id), body, claims)


@router.post(TASK_VALUES_DELETE_PATH, status_code=204, responses=DOCUMENTED, openapi_extra=_KEYS_BODY)
def delete_task_state_many(task_instance_id: str, claims: Claims, keys: KeysBody) -> None:
    """Remove each of `keys`; keys that are not there are not an error."""
    state_backend().delete_many(check_task_instance(claims, write=True, path_ti_id=task_instance_id), keys)


# --- asset state -------------------------------------------------------------------------


@router.post(ASSET_VALUES_READ_PATH, responses=_ASSET_ERRORS, openapi_extra=_KEYS_BODY)
def get_asset_state_many(
    claims: Claims, keys: KeysBody, name: AssetName = None, uri: AssetUri = None
) -> StateValuesResponse:
    """The values of those of `keys` that an asset's state holds; the task must declare the asset."""
    return _read(asset_scope(claims, name, uri, write=False), keys)


@router.put(
    ASSET_VALUES_PATH, responses={**_ASSET_ERRORS, **UNSUPPORTED_DOCUMENTED}, openapi_extra=_VALUES_BODY
)
def set_asset_state_many(
    claims: Claims, body: ValuesBody, name: AssetName = None, uri: AssetUri = None
) -> StateVersionsResponse:
    """Store every pair of `values` in an asset's state; the running task must have it as an outlet."""
    return _write(asset_scope(claims, name, uri, write=True), body, claims)


@router.post(ASSET_VALUES_DELETE_PATH, status_code=204, responses=_ASSET_ERRORS, openapi_extra=_KEYS_BODY)
def delete_asset_state_many(
    claims: Claims, keys: KeysBody, name: AssetName = None, uri: AssetUri = None
) -> None:
    """Remove each of `keys` from an asset's state; the running task must have it as an outlet."""
    state_backend().delete_many(asset_scope(claims, name, uri, write=True), keys)
