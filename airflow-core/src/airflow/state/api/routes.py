"""
Routes: one task instance's keys, and the state of an asset the task declares.

A key is never part of the path (see :mod:`airflow.state.protocol`): it is the ``key`` query
parameter of the ``.../value`` routes, read strictly from the raw query string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from airflow.state import codec, expiry
from airflow.state.api.credentials import TaskInstanceClaims
from airflow.state.api.datamodels import (
    INCREMENT_BODY_SCHEMA,
    VALUE_BODY_SCHEMA,
    StateIncrementResponse,
    StateKeysResponse,
    StateValueResponse,
    StateWriteResponse,
)
from airflow.state.api.errors import (
    CONFLICT_DOCUMENTED,
    DOCUMENTED,
    UNSUPPORTED_DOCUMENTED,
    refusal,
    unprocessable,
)
from airflow.state.api.security import Claims, check_task_instance, declared_asset_id
from airflow.state.protocol import (
    ASSET_INCREMENT_PATH,
    ASSET_KEYS_PATH,
    ASSET_VALUE_PATH,
    IF_VERSION_PARAMETER,
    KEY_PARAMETER,
    NEVER_EXPIRES,
    TASK_INCREMENT_PATH,
    TASK_KEYS_PATH,
    TASK_SUCCEEDED_PATH,
    TASK_VALUE_PATH,
    TTL_FIELD,
    Reason,
)
from airflow_shared.state import (
    MAX_COUNTER,
    AssetScope,
    BaseStateBackend,
    StateScope,
    StateWriter,
    validate_increment,
    validate_key,
)
from fastapi import APIRouter, Depends, Query, Request, status

router = APIRouter()

AssetName = Annotated[str | None, Query(description="The asset's name")]
AssetUri = Annotated[str | None, Query(description="The asset's URI")]
IfVersion = Annotated[
    int | None,
    Query(
        alias=IF_VERSION_PARAMETER,
        ge=0,
        le=MAX_COUNTER,
        description="Write only if the key is at this version (0: only if it is absent or expired); "
        "otherwise 409 `version_conflict` with the stored version",
    ),
]
# The JSON envelope around a value (`{"value": ..., "ttl": ...}`) and some whitespace.
BODY_ENVELOPE_BYTES = 1024
_WRITE_BODY = {"requestBody": {"required": True, "content": {"application/json": VALUE_BODY_SCHEMA}}}
_INCREMENT_BODY = {"requestBody": {"required": True, "content": {"application/json": INCREMENT_BODY_SCHEMA}}}
_WRITE_ERRORS = {**DOCUMENTED, **CONFLICT_DOCUMENTED, **UNSUPPORTED_DOCUMENTED}
_INCREMENT_ERRORS = {**DOCUMENTED, **UNSUPPORTED_DOCUMENTED}


def state_backend() -> BaseStateBackend:
    from airflow.state.configured_backend import get_state_backend

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


async def _valid_key(  # async: no thread pool hop (see credential_claims)
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


async def body_within(request: Request, limit: int, explanation: str | None = None) -> bytes:
    """The request body, refused (413) past *limit* bytes with *explanation* (default: one value's)."""
    explanation = explanation or (
        f"values are limited to {limit - BODY_ENVELOPE_BYTES} bytes of compact UTF-8 JSON "
        "([state] max_value_bytes)"
    )
    too_large = refusal(
        status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        Reason.BODY_TOO_LARGE,
        f"request body is larger than {limit} bytes: {explanation}",
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


async def json_object(
    request: Request,
    fields: frozenset[str],
    shape: str,
    limit: int | None = None,
    explanation: str | None = None,
) -> dict[str, Any]:
    """
    The request body: a JSON object of *fields* only (an unknown field is refused, not ignored),
    of at most *limit* bytes (default: one value and its envelope; *explanation* says which limit).
    """
    body = await body_within(request, limit or codec.max_value_bytes() + BODY_ENVELOPE_BYTES, explanation)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise unprocessable(Reason.INVALID_VALUE, f"request body is not JSON: {error}") from None
    if not isinstance(document, dict) or not fields.issuperset(document):
        unknown = sorted(set(document) - fields) if isinstance(document, dict) else []
        named = f" (unknown: {', '.join(unknown)})" if unknown else ""
        raise unprocessable(Reason.INVALID_VALUE, f"request body must be {shape}{named}")
    return document


@dataclass(frozen=True)
class WriteBody:
    """A write's body: the value as stored text, and its ``ttl`` (``None``: the default)."""

    text: str
    ttl: expiry.Ttl = None


@dataclass(frozen=True)
class IncrementBody:
    by: int = 1
    ttl: expiry.Ttl = None


_VALUE_SHAPE = '{"value": <any JSON but null>, "ttl": <seconds> | "never" (optional)}'
_INCREMENT_SHAPE = '{"by": <integer, default 1>, "ttl": <seconds> | "never" (optional)}'


async def _write_body(request: Request, claims: Claims) -> WriteBody:
    # `claims` is resolved first: an unauthenticated request is refused before its body is read.
    document = await json_object(request, frozenset({"value", TTL_FIELD}), _VALUE_SHAPE)
    if "value" not in document:
        raise unprocessable(Reason.INVALID_VALUE, f"request body must be {_VALUE_SHAPE}: no value")
    try:
        text = codec.encode(document["value"])
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_VALUE, error) from None
    return WriteBody(text, body_ttl(document, _VALUE_SHAPE))


async def _increment_body(request: Request, claims: Claims) -> IncrementBody:
    document = await json_object(request, frozenset({"by", TTL_FIELD}), _INCREMENT_SHAPE)
    by = document.get("by", 1)
    try:
        validate_increment(by)
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_REQUEST, error) from None
    return IncrementBody(by, body_ttl(document, _INCREMENT_SHAPE))


WriteBodyDep = Annotated[WriteBody, Depends(_write_body)]
IncrementBodyDep = Annotated[IncrementBody, Depends(_increment_body)]


# --- expiry: the body's ttl, else the default ---------------------------------------------------

LONGEST_TTL_SECONDS = int(expiry.LONGEST_TTL.total_seconds())


def body_ttl(document: dict[str, Any], shape: str) -> expiry.Ttl:
    """
    A write body's ``ttl``: a number of seconds (more than 0, at most a century) or ``"never"``;
    absent: ``None``, the default (:func:`airflow.state.expiry.expires_at_for` applies it). The
    operator routes read theirs with this too.
    """
    if TTL_FIELD not in document:
        return None
    ttl = document[TTL_FIELD]
    if ttl == NEVER_EXPIRES:
        return expiry.NEVER
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 < ttl <= LONGEST_TTL_SECONDS:
        return timedelta(seconds=ttl)
    raise unprocessable(
        Reason.INVALID_REQUEST,
        f"ttl must be a number of seconds greater than 0 and at most {LONGEST_TTL_SECONDS} "
        f'(100 years), or "{NEVER_EXPIRES}", not {json.dumps(ttl)[:40]}; leave it out for the default; '
        f"request body must be {shape}",
    )


# --- shared ------------------------------------------------------------------------------


def writer_of(claims: TaskInstanceClaims) -> StateWriter:
    return StateWriter.task_try(
        claims.dag_id, claims.run_id, claims.task_id, claims.map_index, claims.try_number
    )


def _read(scope: StateScope, key: str) -> StateValueResponse:
    # One backend call on this hot path: the versioned read where the backend keeps versions.
    backend = state_backend()
    version = None
    if backend.supports_versions:
        versioned = backend.get_versioned(scope, key)
        stored, version = (versioned.value, versioned.version) if versioned else (None, None)
    else:
        stored = backend.get(scope, key)
    if stored is None:
        raise refusal(status.HTTP_404_NOT_FOUND, Reason.KEY_NOT_FOUND, f"no state under key {key!r}")
    return StateValueResponse(key=key, value=codec.decode(stored), version=version)


def _write(
    scope: StateScope, key: str, body: WriteBody, claims: TaskInstanceClaims, if_version: int | None
) -> StateWriteResponse:
    # The backend raises StateConflictError (409) and StateCapabilityError (501): see errors.py.
    backend = state_backend()
    version = backend.write(
        scope,
        key,
        body.text,
        writer=writer_of(claims),
        expires_at=expiry.expires_at_for(scope, body.ttl, backend),
        if_version=if_version,
    )
    return StateWriteResponse(key=key, version=version)


def _increment(
    scope: StateScope, key: str, body: IncrementBody, claims: TaskInstanceClaims
) -> StateIncrementResponse:
    backend = state_backend()
    when = expiry.expires_at_for(scope, body.ttl, backend)
    try:
        value = backend.increment(scope, key, body.by, writer=writer_of(claims), expires_at=when)
    except ValueError as error:  # not an integer stored, or the sum leaves 64 bits: nothing written
        raise unprocessable(Reason.INVALID_VALUE, error) from None
    return StateIncrementResponse(key=key, value=value)


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such key (`key_not_found`)"}}


# --- task instance state -----------------------------------------------------------------


@router.get(TASK_KEYS_PATH, responses=DOCUMENTED)
def list_task_keys(task_instance_id: str, claims: Claims) -> StateKeysResponse:
    """The keys of the calling task instance's state (its own map index), sorted."""
    scope = check_task_instance(claims, write=False, path_ti_id=task_instance_id)
    return StateKeysResponse(keys=state_backend().keys(scope))


@router.delete(TASK_KEYS_PATH, status_code=204, responses=DOCUMENTED)
def clear_task_state(task_instance_id: str, claims: Claims) -> None:
    """Remove every key of the calling task instance's state (its own map index)."""
    state_backend().clear(check_task_instance(claims, write=True, path_ti_id=task_instance_id))


@router.get(TASK_VALUE_PATH, responses={**DOCUMENTED, **_NOT_FOUND})
def get_task_state(task_instance_id: str, claims: Claims, key: Key) -> StateValueResponse:
    """The value stored under `key` in the calling task instance's state, with its version."""
    return _read(check_task_instance(claims, write=False, path_ti_id=task_instance_id), key)


@router.put(TASK_VALUE_PATH, responses=_WRITE_ERRORS, openapi_extra=_WRITE_BODY)
def set_task_state(
    task_instance_id: str, claims: Claims, key: Key, body: WriteBodyDep, if_version: IfVersion = None
) -> StateWriteResponse:
    """
    Store a value under `key` and answer its new version; only the running try the credential
    names may write. Without `ttl` the key expires after `[state] default_task_retention`.
    """
    scope = check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    return _write(scope, key, body, claims, if_version)


@router.post(TASK_INCREMENT_PATH, responses=_INCREMENT_ERRORS, openapi_extra=_INCREMENT_BODY)
def increment_task_state(
    task_instance_id: str, claims: Claims, key: Key, body: IncrementBodyDep
) -> StateIncrementResponse:
    """
    Add `by` to the integer stored under `key` (absent: 0) in one atomic step and answer the sum;
    a key holding anything but a JSON integer is refused (`invalid_value`) and left as it is.
    """
    scope = check_task_instance(claims, write=True, path_ti_id=task_instance_id)
    return _increment(scope, key, body, claims)


@router.delete(TASK_VALUE_PATH, status_code=204, responses=DOCUMENTED)
def delete_task_state(task_instance_id: str, claims: Claims, key: Key) -> None:
    """Remove `key`; removing a key that is not there is not an error."""
    state_backend().delete(check_task_instance(claims, write=True, path_ti_id=task_instance_id), key)


@router.post(TASK_SUCCEEDED_PATH, status_code=204, responses=DOCUMENTED)
def task_instance_succeeded(task_instance_id: str, claims: Claims) -> None:
    """
    Clear the state of the calling task instance (its own map index) once its try has succeeded.

    The task process calls it after its supervisor reported the success, when `[state]
    clear_on_success` is on or the task sets `clear_task_state_on_success` (see
    `airflow.state.worker.listener`). Only the try that succeeded may: any other state of the task
    instance, or a later try, is refused.
    """
    state_backend().clear(
        check_task_instance(claims, write=False, path_ti_id=task_instance_id, succeeded=True)
    )


# --- asset state -------------------------------------------------------------------------


def asset_scope(claims: TaskInstanceClaims, name: str | None, uri: str | None, *, write: bool) -> AssetScope:
    check_task_instance(claims, write=write)
    return AssetScope(declared_asset_id(claims, name, uri, write=write))


_ASSET_ERRORS = {**DOCUMENTED, 404: {"description": "No such asset (`asset_not_found`) or key"}}


@router.get(ASSET_KEYS_PATH, responses=_ASSET_ERRORS)
def list_asset_keys(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> StateKeysResponse:
    """The keys of an asset's state; the task must declare the asset as an inlet or an outlet."""
    return StateKeysResponse(keys=state_backend().keys(asset_scope(claims, name, uri, write=False)))


@router.delete(ASSET_KEYS_PATH, status_code=204, responses=_ASSET_ERRORS)
def clear_asset_state(claims: Claims, name: AssetName = None, uri: AssetUri = None) -> None:
    """Remove every key of an asset's state; only a running task with the asset as an outlet may."""
    state_backend().clear(asset_scope(claims, name, uri, write=True))


@router.get(ASSET_VALUE_PATH, responses=_ASSET_ERRORS)
def get_asset_state(
    claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None
) -> StateValueResponse:
    """The value stored under `key` in an asset's state, with its version."""
    return _read(asset_scope(claims, name, uri, write=False), key)


@router.put(
    ASSET_VALUE_PATH,
    responses={**_ASSET_ERRORS, **CONFLICT_DOCUMENTED, **UNSUPPORTED_DOCUMENTED},
    openapi_extra=_WRITE_BODY,
)
def set_asset_state(
    claims: Claims,
    key: Key,
    body: WriteBodyDep,
    name: AssetName = None,
    uri: AssetUri = None,
    if_version: IfVersion = None,
) -> StateWriteResponse:
    """
    Store a value under `key` in an asset's state and answer its new version; the running task
    must have the asset as an outlet, and is recorded as the writer. Without `ttl` it never expires.
    """
    return _write(asset_scope(claims, name, uri, write=True), key, body, claims, if_version)


@router.post(
    ASSET_INCREMENT_PATH,
    responses={**_ASSET_ERRORS, **UNSUPPORTED_DOCUMENTED},
    openapi_extra=_INCREMENT_BODY,
)
def increment_asset_state(
    claims: Claims, key: Key, body: IncrementBodyDep, name: AssetName = None, uri: AssetUri = None
) -> StateIncrementResponse:
    """Add `by` to the integer stored under `key` in an asset's state (the asset must be an outlet)."""
    return _increment(asset_scope(claims, name, uri, write=True), key, body, claims)


@router.delete(ASSET_VALUE_PATH, status_code=204, responses=_ASSET_ERRORS)
def delete_asset_state(claims: Claims, key: Key, name: AssetName = None, uri: AssetUri = None) -> None:
    """Remove `key` from an asset's state; the running task must have the asset as an outlet."""
    state_backend().delete(asset_scope(claims, name, uri, write=True), key)
