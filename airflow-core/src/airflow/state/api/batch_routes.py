"""
Routes of many keys in one request: read, write or delete up to ``MAX_MANY_KEYS`` keys of the
calling task instance's state, or of an asset it declares, with one backend call.

The keys travel in the JSON body (``{"keys": [...]}``, ``{"values": {...}}``), never in the path
or the query, and the body is read only after the credential is verified and never past
``[state] max_batch_bytes``. Every key and value is checked before the backend is called: a batch
with one bad entry is refused whole, naming the entry, and writes nothing.
"""

# No `from __future__ import annotations`: see airflow.state.api.routes (routes built in a function).

from dataclasses import dataclass
from typing import Annotated, Any

from airflow.state import codec, expiry
from airflow.state.api.datamodels import KEYS_BODY, VALUES_BODY, StateValuesResponse, StateVersionsResponse
from airflow.state.api.errors import UNSUPPORTED_DOCUMENTED, refused_as, unprocessable
from airflow.state.api.params import body_ttl, json_object
from airflow.state.api.routes import ASSET, TASK, Scoped, ScopeKind, writer_of
from airflow.state.api.security import Claims
from airflow.state.configured_backend import get_state_backend
from airflow.state.protocol import TTL_FIELD, Reason
from airflow_shared.state import validate_batch_size, validate_many_keys
from fastapi import APIRouter, Depends, Request

router = APIRouter()

_KEYS_SHAPE = '{"keys": [<key>, ...]}'
_VALUES_SHAPE = '{"values": {<key>: <any JSON but null>, ...}, "ttl": <seconds> | "never" (optional)}'
_BATCH_LIMIT = "batches are limited by [state] max_batch_bytes; split the batch"


def _valid_keys(keys: list[str] | dict[str, Any]) -> list[str]:
    with refused_as(Reason.INVALID_REQUEST):
        validate_batch_size(len(keys), "a batch")
    with refused_as(Reason.INVALID_KEY):
        return validate_many_keys(keys)


async def _keys_body(request: Request) -> list[str]:
    document = await json_object(
        request, frozenset({"keys"}), _KEYS_SHAPE, Reason.INVALID_REQUEST, batch=_BATCH_LIMIT
    )
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {_KEYS_SHAPE}")
    return _valid_keys(keys)


@dataclass(frozen=True)
class _ValuesBody:
    """A batch write's body: each key's value as stored text, and the batch's ``ttl``."""

    texts: dict[str, str]
    ttl: expiry.Ttl


async def _values_body(request: Request) -> _ValuesBody:
    fields = frozenset({"values", TTL_FIELD})
    document = await json_object(request, fields, _VALUES_SHAPE, Reason.INVALID_VALUE, batch=_BATCH_LIMIT)
    values = document.get("values")
    if not isinstance(values, dict):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {_VALUES_SHAPE}")
    _valid_keys(values)
    texts = {}
    for key, value in values.items():
        with refused_as(Reason.INVALID_VALUE, f"the value of key {key!r:.60}: "):
            texts[key] = codec.encode(value)
    return _ValuesBody(texts, body_ttl(document, _VALUES_SHAPE))


KeysBody = Annotated[list[str], Depends(_keys_body)]
ValuesBody = Annotated[_ValuesBody, Depends(_values_body)]


def _batch_routes(kind: ScopeKind) -> None:
    Scope = Annotated[Scoped, Depends(kind.scope)]  # first: the credential before the body
    path, the, state = kind.values_path, kind.name, kind.state

    @router.post(
        path + "/read",
        responses=kind.errors,
        openapi_extra=KEYS_BODY,
        name=f"get_{the}_state_many",
        description=f"The values of those of `keys` that {state} holds (others are left out){kind.reads}.",
    )
    def get_many(scoped: Scope, keys: KeysBody) -> StateValuesResponse:
        stored = get_state_backend().get_many(scoped(False), keys)
        return StateValuesResponse(values={key: codec.decode(text) for key, text in stored.items()})

    @router.put(
        path,
        responses={**kind.errors, **UNSUPPORTED_DOCUMENTED},
        openapi_extra=VALUES_BODY,
        name=f"set_{the}_state_many",
        description=f"Store every key-value pair of `values` in {state} and answer each key's new "
        f"version{kind.writes}. Atomic where the backend is (the metastore and Redis backends are).",
    )
    def set_many(scoped: Scope, claims: Claims, body: ValuesBody) -> StateVersionsResponse:
        scope, backend = scoped(True), get_state_backend()
        expires_at = expiry.expires_at_for(scope, body.ttl, backend)
        versions = backend.set_many(scope, body.texts, writer=writer_of(claims), expires_at=expires_at)
        return StateVersionsResponse(versions=versions)

    @router.post(
        path + "/delete",
        status_code=204,
        responses=kind.errors,
        openapi_extra=KEYS_BODY,
        name=f"delete_{the}_state_many",
        description=f"Remove each of `keys` from {state}{kind.writes}; keys that are not there are not "
        "an error.",
    )
    def delete_many(scoped: Scope, keys: KeysBody) -> None:
        get_state_backend().delete_many(scoped(True), keys)


for _kind in (TASK, ASSET):
    _batch_routes(_kind)
