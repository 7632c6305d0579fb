"""
The operators' REST API (``/api/v1`` of the state app): task state and asset state, each operation
written once for both kinds of scope, with Airflow's access to the DAG's task instances or to assets
(GET read, PUT write, DELETE delete). Operators' writes record the writer ``api``.
"""

# No `from __future__ import annotations`: see airflow_task_state.api.routes (routes built in a function).

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from airflow.utils.session import create_session
from airflow_shared.state import API_WRITER, AssetScope, StateScope, TaskScope
from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from airflow_task_state import large_values, manage, object_storage
from airflow_task_state.api.datamodels import (
    INCREMENT_BODY,
    WRITE_BODY,
    AssetResponse,
    AssetStateEntriesResponse,
    AssetStateEntryResponse,
    AssetsWithStateResponse,
    AssetWithState,
    StateEntryFields,
    StateEntryResponse,
    StateIncrementExpiresResponse,
    StateWriteExpiresResponse,
    TaskInstancesWithStateResponse,
    TaskInstanceWithState,
    TaskStateEntriesResponse,
)
from airflow_task_state.api.errors import (
    INCREMENT_DOCUMENTED,
    OPERATOR_DOCUMENTED,
    WRITE_DOCUMENTED,
    refusal,
    refused_as,
)
from airflow_task_state.api.operator.auth import (
    Method,
    OperatorUser,
    asset_state_access,
    may_access_asset,
    task_state_access,
    task_state_permissions,
)
from airflow_task_state.api.params import (
    AssetId,
    IfVersion,
    Key,
    KeyPrefix,
    Limit,
    MapIndex,
    NewIncrement,
    NewWrite,
    Offset,
)
from airflow_task_state.protocol import Reason

router = APIRouter(prefix="/api/v1")

RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"


def _task_scope(dag_id: str, dag_run_id: str, task_id: str, map_index: MapIndex = -1) -> TaskScope:
    with create_session() as session:
        return manage.find_task_scope(dag_id, dag_run_id, task_id, map_index, session)


def _task_clear_scope(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    map_index: MapIndex = -1,
    all_map_indices: Annotated[
        bool, Query(description="Clear every map index of the task in this run, not only `map_index`")
    ] = False,
) -> tuple[StateScope, bool]:
    with create_session() as session:  # map index None: the scope of every map index
        index = None if all_map_indices else map_index
        return manage.find_task_scope(dag_id, dag_run_id, task_id, index, session), all_map_indices


def _asset(asset_id: AssetId) -> manage.AssetInfo:
    """The asset, or 404 ``asset_not_found``: a typo never reads or writes an empty scope."""
    with create_session() as session:
        return manage.find_asset(session, asset_id=asset_id)


Asset = Annotated[manage.AssetInfo, Depends(_asset)]


def _asset_scope(asset: Asset) -> AssetScope:
    return AssetScope(asset.asset_id)


def _asset_clear_scope(asset: Asset) -> tuple[StateScope, bool]:
    return AssetScope(asset.asset_id), False


def _asset_page(asset: Asset, user: OperatorUser) -> dict[str, Any]:
    return {
        "can_edit": may_access_asset(user, "PUT", asset.asset_id),
        "can_delete": may_access_asset(user, "DELETE", asset.asset_id),
        "asset": AssetResponse(**asdict(asset)),
    }


@dataclass(frozen=True)
class ScopeKind:
    """One kind of scope the operators' API serves: its paths, access, models, what the routes say of it."""

    name: str  # in route names: "task", "asset"
    router: APIRouter
    path: str  # the scope's path; its keys are under path + "/state", "/stateEntry", "/stateIncrement"
    access: Callable[[Method], Any]
    scope: Callable[..., StateScope]
    clear_scope: Callable[..., tuple[StateScope, bool]]
    page_fields: Callable[..., dict[str, Any]]  # what a listing adds to its entries
    page: type[BaseModel]
    entry: type[StateEntryFields]
    # For the descriptions: whose state, what a listing and a clear add, who a write records, the ttl.
    state: str
    listed: str
    cleared: str
    writer: str
    default_ttl: str


TASK = ScopeKind(
    name="task",
    router=APIRouter(tags=["Task state"], responses=OPERATOR_DOCUMENTED),
    path=RUN + "/taskInstances/{task_id}",
    access=task_state_access,
    scope=_task_scope,
    clear_scope=_task_clear_scope,
    page_fields=task_state_permissions,
    page=TaskStateEntriesResponse,
    entry=StateEntryResponse,
    state="the task instance's state",
    listed=". 404 for a dag run or task instance that does not exist.",
    cleared="; with `all_map_indices=true`, of every map index of the task in this dag run (then "
    "`map_index` is ignored).",
    writer="`updated_by_try` becomes null",
    default_ttl="`[state] default_task_retention`",
)
ASSET = ScopeKind(
    name="asset",
    router=APIRouter(tags=["Asset state"], responses=OPERATOR_DOCUMENTED),
    path="/assets/{asset_id}",
    access=asset_state_access,
    scope=_asset_scope,
    clear_scope=_asset_clear_scope,
    page_fields=_asset_page,
    page=AssetStateEntriesResponse,
    entry=AssetStateEntryResponse,
    state="the asset's state",
    listed=", and the asset itself. 404 `asset_not_found` for an unknown asset.",
    cleared=".",
    writer="`updated_by` becomes `api`",
    default_ttl="never expires",
)


_QUERY_FORM = " The key is the `key` query parameter, so any key can be named."


def _state_routes(kind: ScopeKind) -> None:
    read, write, delete = kind.access("GET"), kind.access("PUT"), kind.access("DELETE")
    # After the key and the body: as before, a bad key or body is refused before a lookup.
    Scope = Annotated[StateScope, Depends(kind.scope)]
    Cleared = Annotated[tuple[StateScope, bool], Depends(kind.clear_scope)]
    PageFields = Annotated[dict[str, Any], Depends(kind.page_fields)]
    the, a = kind.name, "an" if kind.name == "asset" else "a"
    entry = kind.path + "/stateEntry"

    @kind.router.get(
        kind.path + "/state",
        dependencies=[read],
        response_model=kind.page,
        name=f"list_{the}_state",
        summary=(a + kind.state.removeprefix("the")).capitalize(),
        description=f"A page of {kind.state.removesuffix(' state')} keys with their values, sorted by key "
        "(code point), optionally only those starting with `key_prefix`" + kind.listed,
    )
    def list_state(
        key_prefix: KeyPrefix, scope: Scope, page_fields: PageFields, limit: Limit = 100, offset: Offset = 0
    ) -> Any:
        entries, total = manage.entries(scope, key_prefix=key_prefix, offset=offset, limit=limit)
        return kind.page(entries=[kind.entry.of(e) for e in entries], total_entries=total, **page_fields)

    @kind.router.delete(
        kind.path + "/state",
        dependencies=[delete],
        status_code=204,
        name=f"clear_{the}_state",
        summary=f"Clear {the} state",
        description=f"Remove every key of {kind.state}{kind.cleared}",
    )
    def clear_state(cleared: Cleared) -> None:
        manage.clear(cleared[0], all_map_indices=cleared[1])

    @kind.router.get(
        entry,
        dependencies=[read],
        response_model=kind.entry,
        name=f"get_{the}_state_entry",
        summary=f"Get {a} {the} state key",
        description=f"One key of {kind.state}. 404 `key_not_found` when it holds no such key." + _QUERY_FORM,
    )
    def get_entry(key: Key, scope: Scope) -> Any:
        return kind.entry.of(manage.entry(scope, key))

    @kind.router.get(
        kind.path + "/stateObject",
        dependencies=[read],
        response_class=StreamingResponse,
        responses={200: {"content": {"application/octet-stream": {}, "application/json": {}}}},
        name=f"get_{the}_state_object",
        summary=f"Fetch {a} {the} state key's large value",
        description="The bytes of the object a large value's reference names (its entry shows the "
        "reference: size, digest and path; the digest is `blake3`, or `sha256` in references written by "
        "earlier versions), streamed and checked against the digest as they go (header "
        "`X-Content-Digest: blake3=<hex>`): a mismatch ends the response before its last bytes. 409 "
        "`invalid_request` for a key holding a "
        "small value; 501 `unsupported` when this API server has no `[state] object_storage_path` "
        "(only workers hold the storage's credentials by default)." + _QUERY_FORM,
    )
    def get_object(key: Key, scope: Scope) -> StreamingResponse:
        value = manage.entry(scope, key).value
        if not large_values.is_reference(value):
            raise refusal(409, Reason.INVALID_REQUEST, f"key {key!r} holds a small value: read its entry")
        with refused_as(Reason.INVALID_VALUE):
            reference = large_values.parse(value)
        if not object_storage.configured():
            raise refusal(
                501,
                Reason.UNSUPPORTED,
                f"key {key!r} holds {reference.size} bytes at {reference.path}; this API server has no "
                "[state] object_storage_path (and credentials) to read it: set it here, or read it where "
                "they are",
            )
        media_type = "application/json" if reference.kind == "json" else "application/octet-stream"
        return StreamingResponse(
            object_storage.read(reference),
            media_type=media_type,
            headers={
                "Content-Length": str(reference.size),
                "X-Content-Digest": f"{reference.algorithm}={reference.digest}",
            },
        )

    @kind.router.put(
        entry,
        dependencies=[write],
        openapi_extra=WRITE_BODY,
        responses=WRITE_DOCUMENTED,
        name=f"put_{the}_state_entry",
        summary=f"Set {a} {the} state key",
        description='Store `{"value": <any JSON but null>, "ttl": <seconds> | "never"}` under the key, as '
        f"an operator ({kind.writer}); `ttl` left out: {kind.default_ttl}. With `if_version=n`, only "
        "if the key is still at version n (0: only if absent). Returns the key's new version and expiry."
        + _QUERY_FORM,
    )
    def put_entry(
        key: Key, body: NewWrite, scope: Scope, if_version: IfVersion = None
    ) -> StateWriteExpiresResponse:
        with refused_as(Reason.INVALID_VALUE):
            written = manage.put(
                scope, key, body.text, ttl=body.ttl, if_version=if_version, writer=API_WRITER
            )
        return StateWriteExpiresResponse(key=key, version=written.version, expires_at=written.expires_at)

    @kind.router.delete(
        entry,
        dependencies=[delete],
        status_code=204,
        name=f"delete_{the}_state_entry",
        summary=f"Delete {a} {the} state key",
        description=f"Remove the key from {kind.state}; not an error when it is not there." + _QUERY_FORM,
    )
    def delete_entry(key: Key, scope: Scope) -> None:
        manage.delete(scope, key)

    @kind.router.post(
        kind.path + "/stateIncrement",
        dependencies=[write],
        openapi_extra=INCREMENT_BODY,
        responses=INCREMENT_DOCUMENTED,
        name=f"increment_{the}_state_entry",
        summary=f"Increment {a} {the} state key",
        description='Add `{"by": <integer, default 1>}` to the integer stored under the key (absent: 0) '
        "in one atomic step, so concurrent increments never lose one another, and return the result. "
        f"Needs the permission of a write; `ttl` as for a write (left out: {kind.default_ttl}). "
        "An empty body adds 1; a key holding anything but an integer, or a sum beyond 64 bits, is "
        "refused (`invalid_value`) and left as it is." + _QUERY_FORM,
    )
    def increment_entry(key: Key, body: NewIncrement, scope: Scope) -> StateIncrementExpiresResponse:
        with refused_as(Reason.INVALID_VALUE):
            added = manage.increment(scope, key, body.by, ttl=body.ttl, writer=API_WRITER)
        return StateIncrementExpiresResponse(key=key, value=added.value, expires_at=added.expires_at)


# --- what holds state: the task instances of a run, the assets ---------------------------------


@TASK.router.get(
    RUN + "/state",
    dependencies=[task_state_access("GET")],
    summary="Task instances of a dag run that hold state",
)
def list_task_instances_with_state(
    dag_id: str, dag_run_id: str, user: OperatorUser
) -> TaskInstancesWithStateResponse:
    """The task instances of the dag run whose state holds keys, with how many, by task id and map index."""
    with create_session() as session:
        found = manage.task_instances_with_state(dag_id, dag_run_id, session)
    return TaskInstancesWithStateResponse(
        task_instances=[
            TaskInstanceWithState(
                task_id=ti.scope.task_id, map_index=ti.scope.map_index, key_count=ti.key_count
            )
            for ti in found
        ],
        total_entries=len(found),
        **task_state_permissions(dag_id, user),
    )


@ASSET.router.get("/assets", dependencies=[asset_state_access("GET")], summary="Assets that hold state")
def list_assets_with_state(
    user: OperatorUser, limit: Limit = 100, offset: Offset = 0
) -> AssetsWithStateResponse:
    """A page of the assets the caller may read whose state holds keys, with how many, by name and URI."""
    with create_session() as session:
        found = manage.assets_with_state(session)
    readable = [(asset, count) for asset, count in found if may_access_asset(user, "GET", asset.asset_id)]
    page = readable[offset : offset + limit]
    return AssetsWithStateResponse(
        assets=[AssetWithState(**asdict(asset), key_count=count) for asset, count in page],
        total_entries=len(readable),
        can_edit=may_access_asset(user, "PUT"),
    )


for _kind in (TASK, ASSET):
    _state_routes(_kind)
    router.include_router(_kind.router)
