"""
Task state, as operators see it: the task instances of a dag run that hold state, and each one's
keys. Access is Airflow's for the DAG's task instances (GET read, PUT write, DELETE delete).

Every keyed operation exists twice: with the key at the end of the path (``.../state/{key}``) for
ordinary keys, and with it as the ``key`` query parameter (``.../stateEntry?key=``), which takes
every key, ``.`` and ``..`` included; the UI always uses the second. Increments likewise:
``.../stateIncrement/{key}`` and ``.../stateIncrement?key=``. Operators' writes record the writer
``api``.
"""

from __future__ import annotations

from typing import Annotated

from airflow.state import manage
from airflow.state.api.errors import OPERATOR_DOCUMENTED
from airflow.state.api.operator.auth import OperatorUser, task_state_access, task_state_permissions
from airflow.state.api.operator.datamodels import (
    INCREMENT_BODY,
    WRITE_BODY,
    StateEntryResponse,
    StateIncrementResponse,
    StateWriteResponse,
    TaskInstancesWithStateResponse,
    TaskInstanceWithState,
    TaskStateEntriesResponse,
)
from airflow.state.api.operator.params import (
    IfVersion,
    IncrementBody,
    KeyPrefix,
    Limit,
    MapIndex,
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
from airflow_shared.state import API_WRITER, TaskScope
from fastapi import APIRouter, Query, Response, status

router = APIRouter(tags=["Task state"], responses=OPERATOR_DOCUMENTED)

RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"
TASK_STATE = RUN + "/taskInstances/{task_id}/state"
TASK_STATE_KEY = TASK_STATE + "/{key:path}"
TASK_STATE_ENTRY = RUN + "/taskInstances/{task_id}/stateEntry"
TASK_STATE_INCREMENT = RUN + "/taskInstances/{task_id}/stateIncrement"
TASK_STATE_INCREMENT_KEY = TASK_STATE_INCREMENT + "/{key:path}"

READ, WRITE, DELETE = task_state_access("GET"), task_state_access("PUT"), task_state_access("DELETE")


def _scope(dag_id: str, dag_run_id: str, task_id: str, map_index: int) -> TaskScope:
    from airflow.utils.session import create_session

    with create_session() as session:
        return manage.task_scope(dag_id, dag_run_id, task_id, map_index, session)


# --- the run -------------------------------------------------------------------------------------


@router.get(RUN + "/state", dependencies=[READ], summary="Task instances of a dag run that hold state")
def list_task_instances_with_state(
    dag_id: str, dag_run_id: str, user: OperatorUser
) -> TaskInstancesWithStateResponse:
    """
    The task instances of the dag run whose state holds at least one key, with how many, sorted by
    task id and map index. 404 `dag_run_not_found` for a dag run that does not exist.
    """
    from airflow.utils.session import create_session

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
        **task_state_permissions(user, dag_id),
    )


# --- one task instance ---------------------------------------------------------------------------


@router.get(TASK_STATE, dependencies=[READ], summary="A task instance's state")
def list_task_state(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    user: OperatorUser,
    key_prefix: KeyPrefix,
    map_index: MapIndex = -1,
    limit: Limit = 100,
    offset: Offset = 0,
) -> TaskStateEntriesResponse:
    """
    A page of the task instance's keys with their values, sorted by key (code point), optionally
    only those starting with `key_prefix`. 404 for a dag run or task instance that does not exist.
    """
    scope = _scope(dag_id, dag_run_id, task_id, map_index)
    entries, total = manage.entries(scope, key_prefix=key_prefix, offset=offset, limit=limit)
    return TaskStateEntriesResponse(
        entries=[StateEntryResponse.of(entry) for entry in entries],
        total_entries=total,
        **task_state_permissions(user, dag_id),
    )


@router.delete(
    TASK_STATE, dependencies=[DELETE], status_code=status.HTTP_204_NO_CONTENT, summary="Clear task state"
)
def clear_task_state(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    map_index: MapIndex = -1,
    all_map_indices: Annotated[
        bool, Query(description="Clear every map index of the task in this run, not only `map_index`")
    ] = False,
) -> Response:
    """
    Remove every key of the task instance's state; with `all_map_indices=true`, of every map index
    of the task in this dag run (then `map_index` is ignored).
    """
    if all_map_indices:
        from airflow.utils.session import create_session

        with create_session() as session:
            scope = manage.task_scope_of_every_map_index(dag_id, dag_run_id, task_id, session)
    else:
        scope = _scope(dag_id, dag_run_id, task_id, map_index)
    manage.clear(scope, all_map_indices=all_map_indices)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- one key: the path form and the query form, one implementation -----------------------------


def _get(dag_id: str, dag_run_id: str, task_id: str, map_index: int, key: str) -> StateEntryResponse:
    return StateEntryResponse.of(manage.entry(_scope(dag_id, dag_run_id, task_id, map_index), key))


def _put(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    map_index: int,
    key: str,
    write: WriteRequest,
    if_version: int | None,
) -> StateWriteResponse:
    scope = _scope(dag_id, dag_run_id, task_id, map_index)
    with refusing_backend_errors():
        written = manage.put(scope, key, write.text, ttl=write.ttl, if_version=if_version, writer=API_WRITER)
    return StateWriteResponse(key=key, version=written.version, expires_at=written.expires_at)


def _delete(dag_id: str, dag_run_id: str, task_id: str, map_index: int, key: str) -> Response:
    manage.delete(_scope(dag_id, dag_run_id, task_id, map_index), key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


_GET_DESCRIPTION = "One key of the task instance's state. 404 `key_not_found` when it holds no such key."
_PUT_DESCRIPTION = (
    'Store `{"value": <any JSON but null>, "ttl": <seconds> | "never"}` under the key, as an operator '
    "(`updated_by_try` becomes null); `ttl` left out: `[state] default_task_retention`. With "
    "`if_version=n`, only if the key is still at version n (0: only if absent), else 409 "
    "`version_conflict` with `stored_version`. Returns the key's new version and expiry. "
    "413 `body_too_large`, 422 `invalid_value` past the size limit, 501 `unsupported` for a ttl or "
    "`if_version` the configured backend cannot honour."
)
_DELETE_DESCRIPTION = "Remove the key from the task instance's state; not an error when it is not there."
_PATH_FORM = (
    " Keys with an empty, `.` or `..` path segment are refused (422 `invalid_key`): use `stateEntry?key=`."
)


@router.get(
    TASK_STATE_KEY,
    dependencies=[READ],
    summary="Get a task state key",
    description=_GET_DESCRIPTION + _PATH_FORM,
)
def get_task_state_key(
    dag_id: str, dag_run_id: str, task_id: str, key: PathKey, map_index: MapIndex = -1
) -> StateEntryResponse:
    return _get(dag_id, dag_run_id, task_id, map_index, key)


@router.put(
    TASK_STATE_KEY,
    dependencies=[WRITE],
    openapi_extra=WRITE_BODY,
    responses=WRITE_DOCUMENTED,
    summary="Set a task state key",
    description=_PUT_DESCRIPTION + _PATH_FORM,
)
def put_task_state_key(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    key: PathKey,
    write: NewWrite,
    map_index: MapIndex = -1,
    if_version: IfVersion = None,
) -> StateWriteResponse:
    return _put(dag_id, dag_run_id, task_id, map_index, key, write, if_version)


@router.delete(
    TASK_STATE_KEY,
    dependencies=[DELETE],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a task state key",
    description=_DELETE_DESCRIPTION + _PATH_FORM,
)
def delete_task_state_key(
    dag_id: str, dag_run_id: str, task_id: str, key: PathKey, map_index: MapIndex = -1
) -> Response:
    return _delete(dag_id, dag_run_id, task_id, map_index, key)


_QUERY_FORM = " The key is the `key` query parameter, so any key can be named."


@router.get(
    TASK_STATE_ENTRY,
    dependencies=[READ],
    summary="Get a task state key (key as query parameter)",
    description=_GET_DESCRIPTION + _QUERY_FORM,
)
def get_task_state_entry(
    dag_id: str, dag_run_id: str, task_id: str, key: QueryKey, map_index: MapIndex = -1
) -> StateEntryResponse:
    return _get(dag_id, dag_run_id, task_id, map_index, key)


@router.put(
    TASK_STATE_ENTRY,
    dependencies=[WRITE],
    openapi_extra=WRITE_BODY,
    responses=WRITE_DOCUMENTED,
    summary="Set a task state key (key as query parameter)",
    description=_PUT_DESCRIPTION + _QUERY_FORM,
)
def put_task_state_entry(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    key: QueryKey,
    write: NewWrite,
    map_index: MapIndex = -1,
    if_version: IfVersion = None,
) -> StateWriteResponse:
    return _put(dag_id, dag_run_id, task_id, map_index, key, write, if_version)


@router.delete(
    TASK_STATE_ENTRY,
    dependencies=[DELETE],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a task state key (key as query parameter)",
    description=_DELETE_DESCRIPTION + _QUERY_FORM,
)
def delete_task_state_entry(
    dag_id: str, dag_run_id: str, task_id: str, key: QueryKey, map_index: MapIndex = -1
) -> Response:
    return _delete(dag_id, dag_run_id, task_id, map_index, key)


# --- increments: the path form and the query form ---------------------------------------------


def _increment(
    dag_id: str, dag_run_id: str, task_id: str, map_index: int, key: str, body: IncrementBody
) -> StateIncrementResponse:
    scope = _scope(dag_id, dag_run_id, task_id, map_index)
    with refusing_backend_errors():
        added = manage.increment(scope, key, body.by, ttl=body.ttl, writer=API_WRITER)
    return StateIncrementResponse(key=key, value=added.value, expires_at=added.expires_at)


_INCREMENT_DESCRIPTION = (
    'Add `{"by": <integer, default 1>}` to the integer stored under the key (absent: 0) in one '
    "atomic step, so concurrent increments never lose one another, and return the result. Needs "
    "the permission of a write; `ttl` as for a write (left out: `[state] default_task_retention`). "
    "422 `invalid_value` when the key holds something other than an integer or the sum leaves 64 "
    "bits (nothing is written); 501 `unsupported` when the configured backend cannot increment."
)


@router.post(
    TASK_STATE_INCREMENT_KEY,
    dependencies=[WRITE],
    openapi_extra=INCREMENT_BODY,
    responses=INCREMENT_DOCUMENTED,
    summary="Increment a task state key",
    description=_INCREMENT_DESCRIPTION + _PATH_FORM.replace("stateEntry", "stateIncrement"),
)
def increment_task_state_key(
    dag_id: str, dag_run_id: str, task_id: str, key: PathKey, body: IncrementBody, map_index: MapIndex = -1
) -> StateIncrementResponse:
    return _increment(dag_id, dag_run_id, task_id, map_index, key, body)


@router.post(
    TASK_STATE_INCREMENT,
    dependencies=[WRITE],
    openapi_extra=INCREMENT_BODY,
    responses=INCREMENT_DOCUMENTED,
    summary="Increment a task state key (key as query parameter)",
    description=_INCREMENT_DESCRIPTION + _QUERY_FORM,
)
def increment_task_state_entry(
    dag_id: str, dag_run_id: str, task_id: str, key: QueryKey, body: IncrementBody, map_index: MapIndex = -1
) -> StateIncrementResponse:
    return _increment(dag_id, dag_run_id, task_id, map_index, key, body)
