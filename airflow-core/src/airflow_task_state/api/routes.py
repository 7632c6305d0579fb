"""
Routes of the task API: the calling task instance's keys, and the state of an asset the task
declares, one key or a batch at a time, each operation written once for both kinds of scope.
"""

# No `from __future__ import annotations`: FastAPI reads the signatures of the routes built in
# _state_routes, whose annotations name that function's locals, so they must be evaluated objects.

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from airflow_shared.state import AssetScope
from fastapi import APIRouter, Depends, Query, Response

from airflow_task_state import codec, expiry, manage
from airflow_task_state.api.asset_declarations import declared_asset_id
from airflow_task_state.api.authentication import Claims
from airflow_task_state.api.datamodels import (
    INCREMENT_BODY,
    KEYS_BODY,
    VALUES_BODY,
    WRITE_BODY,
    StateIncrementResponse,
    StateKeysResponse,
    StateValueResponse,
    StateValuesResponse,
    StateVersionsResponse,
    StateWriteResponse,
)
from airflow_task_state.api.errors import CONFLICT_DOCUMENTED, DOCUMENTED, UNSUPPORTED_DOCUMENTED
from airflow_task_state.api.one_key import (
    ScopeAccess,
    add_to_value,
    answer,
    read_value,
    task_instance_access,
    write_value,
    writer_of,
)
from airflow_task_state.api.params import IfVersion, Key, KeysBody, NewIncrement, NewValues, NewWrite
from airflow_task_state.api.task_instance_checks import check_task_instance
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.protocol import (
    ASSET_PREFIX,
    INCREMENT,
    KEYS,
    TASK_PREFIX,
    TASK_SUCCEEDED_PATH,
    VALUE,
    VALUES,
    VALUES_DELETE,
    VALUES_READ,
)

router = APIRouter()


async def _task_instance(task_instance_id: str, claims: Claims) -> ScopeAccess:
    return task_instance_access(claims, task_instance_id)


async def _asset(
    claims: Claims,
    name: Annotated[str | None, Query(description="The asset's name")] = None,
    uri: Annotated[str | None, Query(description="The asset's URI")] = None,
) -> ScopeAccess:
    def scope(write: bool) -> AssetScope:
        check_task_instance(claims, write=write)
        return AssetScope(declared_asset_id(claims, name, uri, write=write))

    return ScopeAccess(scope)


@dataclass(frozen=True)
class ScopeKind:
    """One kind of scope the task API serves: its paths, how it is found, what the routes say of it."""

    name: str  # in route names: "task", "asset"
    prefix: str  # the paths of its operations: prefix + KEYS, VALUE, INCREMENT, VALUES
    scope: Callable[..., Awaitable[ScopeAccess]]
    errors: dict[int | str, dict[str, Any]]
    # For the descriptions: whose state, who may read and write it, and a write's default ttl.
    state: str
    reads: str
    writes: str
    default_ttl: str


TASK = ScopeKind(
    name="task",
    prefix=TASK_PREFIX,
    scope=_task_instance,
    errors=DOCUMENTED,
    state="the calling task instance's state (its own map index)",
    reads="",
    writes="; only the running try the credential names may",
    default_ttl="Without `ttl` the key expires after `[state] default_task_retention`.",
)
ASSET = ScopeKind(
    name="asset",
    prefix=ASSET_PREFIX,
    scope=_asset,
    errors={**DOCUMENTED, 404: {"description": "No such asset (`asset_not_found`) or key"}},
    state="an asset's state",
    reads="; the task must declare the asset as an inlet or an outlet",
    writes="; only a running task with the asset as an outlet may, and is recorded as the writer",
    default_ttl="Without `ttl` it never expires.",
)


def _state_routes(kind: ScopeKind) -> None:
    # First in every signature: the credential is verified before the key and the body are read.
    Scope = Annotated[ScopeAccess, Depends(kind.scope)]
    the, state, errors = kind.name, kind.state, kind.errors

    @router.get(
        kind.prefix + KEYS,
        responses=errors,
        name=f"list_{the}_keys",
        description=f"The keys of {state}, sorted{kind.reads}.",
        response_model=StateKeysResponse,
    )
    def list_keys(access: Scope) -> Response:
        return answer(StateKeysResponse, keys=get_state_backend().keys(access.for_reading()))

    @router.delete(
        kind.prefix + KEYS,
        status_code=204,
        responses=errors,
        name=f"clear_{the}_state",
        description=f"Remove every key of {state}{kind.writes}.",
    )
    def clear_state(access: Scope) -> None:
        manage.clear(access.for_writing())

    def get_state(access: Scope, key: Key) -> Response:
        return read_value(access, key)

    router.add_api_route(
        kind.prefix + VALUE,
        get_state,
        methods=["GET"],
        responses={404: {"description": "No such key (`key_not_found`)"}, **errors},
        name=f"get_{the}_state",
        description=f"The value stored under `key` in {state}, with its version{kind.reads}.",
        response_model=StateValueResponse,
    )

    def set_state(
        access: Scope, claims: Claims, key: Key, body: NewWrite, if_version: IfVersion = None
    ) -> Response:
        return write_value(access, claims, key, body, if_version)

    router.add_api_route(
        kind.prefix + VALUE,
        set_state,
        methods=["PUT"],
        responses={**errors, **CONFLICT_DOCUMENTED, **UNSUPPORTED_DOCUMENTED},
        openapi_extra=WRITE_BODY,
        name=f"set_{the}_state",
        description=f"Store a value under `key` in {state} and answer its new version{kind.writes}. "
        + kind.default_ttl,
        response_model=StateWriteResponse,
    )

    @router.post(
        kind.prefix + INCREMENT,
        responses={**errors, **UNSUPPORTED_DOCUMENTED},
        openapi_extra=INCREMENT_BODY,
        name=f"increment_{the}_state",
        description=f"Add `by` (default 1; an empty body adds 1) to the integer stored under `key` in "
        f"{state} (absent: 0) in one atomic step and answer the sum{kind.writes}; a key holding anything "
        "but a JSON integer is refused (`invalid_value`) and left as it is.",
        response_model=StateIncrementResponse,
    )
    def increment_state(access: Scope, claims: Claims, key: Key, body: NewIncrement) -> Response:
        return add_to_value(access, claims, key, body)

    @router.delete(
        kind.prefix + VALUE,
        status_code=204,
        responses=errors,
        name=f"delete_{the}_state",
        description=f"Remove `key` from {state}{kind.writes}; removing a key that is not there is not an "
        "error.",
    )
    def delete_state(access: Scope, key: Key) -> None:
        manage.delete(access.for_writing(), key, by_running_try=True)

    @router.post(
        kind.prefix + VALUES_READ,
        responses=errors,
        openapi_extra=KEYS_BODY,
        name=f"get_{the}_state_many",
        description=f"The values of those of `keys` that {state} holds (others are left out){kind.reads}.",
        response_model=StateValuesResponse,
    )
    def get_many(access: Scope, keys: KeysBody) -> Response:
        stored = get_state_backend().get_many(access.for_reading(), keys)
        values = {key: codec.decode(text) for key, text in stored.items()}
        return answer(StateValuesResponse, values=values)

    @router.put(
        kind.prefix + VALUES,
        responses={**errors, **UNSUPPORTED_DOCUMENTED},
        openapi_extra=VALUES_BODY,
        name=f"set_{the}_state_many",
        description=f"Store every key-value pair of `values` in {state} and answer each key's new "
        f"version{kind.writes}. Atomic where the backend is (the metastore and Redis backends are).",
        response_model=StateVersionsResponse,
    )
    def set_many(access: Scope, claims: Claims, body: NewValues) -> Response:
        scope, backend = access.for_writing(), get_state_backend()
        expires_at = expiry.expires_at_for(scope, body.ttl, backend)
        versions = backend.set_many(scope, body.texts, writer=writer_of(claims), expires_at=expires_at)
        return answer(StateVersionsResponse, versions=versions)

    @router.post(
        kind.prefix + VALUES_DELETE,
        status_code=204,
        responses=errors,
        openapi_extra=KEYS_BODY,
        name=f"delete_{the}_state_many",
        description=f"Remove each of `keys` from {state}{kind.writes}; keys that are not there are not "
        "an error.",
    )
    def delete_many(access: Scope, keys: KeysBody) -> None:
        get_state_backend().delete_many(access.for_writing(), keys)


@router.post(TASK_SUCCEEDED_PATH, status_code=204, responses=DOCUMENTED)
def task_instance_succeeded(task_instance_id: str, claims: Claims) -> None:
    """
    Clear the state of the calling task instance (its own map index) once its try has succeeded,
    with `[state] clear_on_success` or the task's `clear_task_state_on_success`. Only the try that
    succeeded may: any other state of the task instance, or a later try, is refused.
    """
    get_state_backend().clear(
        check_task_instance(claims, write=False, path_ti_id=task_instance_id, succeeded=True)
    )


for _kind in (TASK, ASSET):
    _state_routes(_kind)
