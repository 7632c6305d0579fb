"""
What operators do to state, shared by the REST API (``api/operator``) and the CLI (``cli``).

Both address state the way people name it (a dag run by dag id and run id, an asset by id, name or
URI), on the configured backend, and both must refuse the same things with the same words: a dag
run, task instance or asset that does not exist raises :class:`NotFound`; a bad key or value
raises ``ValueError``/``TypeError`` from the shared validators or the codec. Writes made here name
no try (``updated_by_try`` stays empty): they are an operator's, not a task's, and the caller says
whose (``API_WRITER``, ``CLI_WRITER``), which asset state records.

Expiry: a write's ``ttl`` is a ``timedelta``, :data:`NEVER`, or ``None`` for the default, which is
``[state] default_task_retention`` for task state and never for asset state (as for task code).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.state import codec
from airflow.state.expiry import Ttl, expires_at_for
from airflow.state.protocol import Reason
from airflow_shared.state import (
    AssetScope,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    validate_key,
)

if TYPE_CHECKING:
    from airflow_shared.state import BaseStateBackend
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


class NotFound(LookupError):
    """The dag run, task instance, asset or key an operator named does not exist."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class AssetInfo:
    """An asset as operators know it."""

    asset_id: int
    name: str
    uri: str
    group: str


@dataclass(frozen=True)
class TaskInstanceState:
    """A task instance of a run that holds state (its complete scope), and how many keys."""

    scope: TaskScope
    key_count: int


@dataclass(frozen=True)
class Entry:
    """A stored entry with its value decoded from JSON, as operators see it."""

    key: str
    value: Any
    updated_at: datetime | None
    updated_by_try: int | None
    #: The key's version; ``None`` when the backend keeps no versions.
    version: int | None = None
    #: When the key expires; ``None``: never (or the backend does not support expiry).
    expires_at: datetime | None = None
    #: Who last wrote it, as text for people (``str(StateWriter)``); asset state only.
    writer: str | None = None
    #: The same writer, field by field (the REST API's ``updated_by``, export files).
    updated_by: StateWriter | None = None

    @property
    def updated_at_text(self) -> str | None:
        """``updated_at`` as ISO 8601 text, as the CLI and export files show it."""
        return None if self.updated_at is None else self.updated_at.isoformat()

    @property
    def expires_at_text(self) -> str | None:
        """``expires_at`` as ISO 8601 text; ``None`` when the key never expires."""
        return None if self.expires_at is None else self.expires_at.isoformat()

    @classmethod
    def of(cls, entry: StateEntry) -> Entry:
        return cls(
            entry.key,
            decode(entry.value),
            entry.updated_at,
            entry.updated_by_try,
            version=entry.version,
            expires_at=entry.expires_at,
            writer=None if entry.writer is None else str(entry.writer),
            updated_by=entry.writer,
        )


def backend() -> BaseStateBackend:
    from airflow.state.configured_backend import get_state_backend

    return get_state_backend()


def decode(text: str) -> Any:
    """
    The JSON value of stored *text*. Text that is not JSON (written by server code straight through
    a backend, not through the task accessors) is shown as the string it is rather than failing.
    """
    try:
        return codec.decode(text)
    except ValueError:
        return text


# --- naming scopes --------------------------------------------------------------------------------


def dag_run_uid(dag_id: str, run_id: str, session: Session) -> str:
    """The ``dag_run_uid`` of the run, or :class:`NotFound` (``dag_run_not_found``)."""
    from airflow.state.airflow_db.run_identity import uid_of_run

    uid = uid_of_run(dag_id, run_id, session)
    if uid is None:
        raise NotFound(Reason.DAG_RUN_NOT_FOUND, f"no dag run with dag_id={dag_id!r} and run_id={run_id!r}")
    return uid


def task_scope(dag_id: str, run_id: str, task_id: str, map_index: int, session: Session) -> TaskScope:
    """
    The scope of a task instance that exists; :class:`NotFound` for a missing dag run or task
    instance, so that a typo never silently reads (or writes) an empty scope.
    """
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    uid = dag_run_uid(dag_id, run_id, session)
    found = session.scalar(
        select(TaskInstance.map_index).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    )
    if found is None:
        mapped = "" if map_index == -1 else f" with map_index={map_index}"
        raise NotFound(
            Reason.TASK_INSTANCE_NOT_FOUND,
            f"dag run {dag_id!r}/{run_id!r} has no task instance {task_id!r}{mapped}",
        )
    return TaskScope(dag_id, run_id, task_id, map_index, dag_run_uid=uid)


def task_scope_of_every_map_index(dag_id: str, run_id: str, task_id: str, session: Session) -> TaskScope:
    """
    The scope ``clear(all_map_indices=True)`` takes: the task must have an instance in the run,
    at any map index (a mapped task has none at -1), or :class:`NotFound`.
    """
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    uid = dag_run_uid(dag_id, run_id, session)
    map_index = session.scalar(
        select(TaskInstance.map_index)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
        .limit(1)
    )
    if map_index is None:
        raise NotFound(
            Reason.TASK_INSTANCE_NOT_FOUND, f"dag run {dag_id!r}/{run_id!r} has no task instance {task_id!r}"
        )
    return TaskScope(dag_id, run_id, task_id, map_index, dag_run_uid=uid)


def matching_assets(
    session: Session,
    *,
    asset_id: int | None = None,
    name: str | None = None,
    uri: str | None = None,
    limit: int | None = None,
) -> list[AssetInfo]:
    """
    The assets with this id, name and/or URI (at most *limit*); :class:`NotFound` when none match.
    A name alone may match several assets.
    """
    from airflow.models.asset import AssetModel
    from sqlalchemy import select

    query = select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetModel.group).limit(limit)
    wanted = {"id": asset_id, "name": name, "uri": uri}
    if all(value is None for value in wanted.values()):
        raise ValueError("name the asset by its id, its name or its URI")
    for column, value in wanted.items():
        if value is not None:
            query = query.where(getattr(AssetModel, column) == value)
    matches = [AssetInfo(row.id, row.name, row.uri, row.group) for row in session.execute(query)]
    if not matches:
        raise NotFound(Reason.ASSET_NOT_FOUND, f"no asset with {_described(wanted)}")
    return matches


def _described(wanted: dict[str, Any]) -> str:
    return " and ".join(f"{column}={value!r}" for column, value in wanted.items() if value is not None)


def find_asset(
    session: Session, *, asset_id: int | None = None, name: str | None = None, uri: str | None = None
) -> AssetInfo:
    """The asset with this id, or this name and/or URI; :class:`NotFound` when none (or several) match."""
    matches = matching_assets(session, asset_id=asset_id, name=name, uri=uri, limit=2)
    if len(matches) > 1:
        raise NotFound(
            Reason.ASSET_NOT_FOUND,
            f"{_described({'id': asset_id, 'name': name, 'uri': uri})} names several assets; "
            "give the asset's id or its URI too",
        )
    return matches[0]


# --- reading ------------------------------------------------------------------------------------


def entries(
    scope: StateScope, *, key_prefix: str | None = None, offset: int = 0, limit: int | None = None
) -> tuple[list[Entry], int]:
    """A page of the scope's entries (values decoded), and how many keys matched in all."""
    page: StateEntryPage = backend().entries(scope, key_prefix=key_prefix, offset=offset, limit=limit)
    return [Entry.of(entry) for entry in page.entries], page.total


def entry(scope: StateScope, key: str) -> Entry:
    """One entry, with what the backend records of its last write; :class:`NotFound` when missing."""
    found = backend().get_entry(scope, key)  # one key read, not a listing of the scope
    if found is not None:
        return Entry.of(found)
    raise NotFound(Reason.KEY_NOT_FOUND, f"no state stored under key {key!r}")


def task_instances_with_state(dag_id: str, run_id: str, session: Session) -> list[TaskInstanceState]:
    """The task instances of the run that hold state, sorted by task id and map index."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    uid = dag_run_uid(dag_id, run_id, session)
    rows = session.execute(
        select(TaskInstance.task_id, TaskInstance.map_index)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        .order_by(TaskInstance.task_id, TaskInstance.map_index)
    ).all()
    scopes = [TaskScope(dag_id, run_id, row.task_id, row.map_index, dag_run_uid=uid) for row in rows]
    counts = backend().key_counts(scopes)
    return [TaskInstanceState(scope, count) for scope, count in zip(scopes, counts, strict=True) if count]


def assets_with_state(session: Session) -> list[tuple[AssetInfo, int]]:
    """Every asset that holds state, with its key count, sorted by name and URI."""
    from airflow.models.asset import AssetModel
    from sqlalchemy import select

    rows = session.execute(
        select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetModel.group).order_by(
            AssetModel.name, AssetModel.uri
        )
    ).all()
    counts = backend().key_counts([AssetScope(row.id) for row in rows])
    return [
        (AssetInfo(row.id, row.name, row.uri, row.group), count)
        for row, count in zip(rows, counts, strict=True)
        if count
    ]


# --- writing ------------------------------------------------------------------------------------


class Written(NamedTuple):
    """What a write stored: the key's new version (``None`` without versions) and its expiry."""

    version: int | None
    expires_at: datetime | None


class Incremented(NamedTuple):
    """What an increment stored: the new integer and the key's expiry."""

    value: int
    expires_at: datetime | None


def put(
    scope: StateScope,
    key: str,
    text: str,
    *,
    ttl: Ttl = None,
    if_version: int | None = None,
    writer: StateWriter | None = None,
) -> Written:
    """
    Store *text*, a value as :func:`airflow.state.codec.encode` made it at the boundary that took it,
    under *key*, as *writer* (``API_WRITER``, ``CLI_WRITER``; no try is recorded).

    :param ttl: how long the key lives from now, :data:`NEVER`, or ``None`` for the default.
    :param if_version: write only if the stored version is this one (0: only if absent), else
        ``StateConflictError`` with the stored version.
    :raises StateCapabilityError: for a ``ttl`` or ``if_version`` the backend cannot honour.
    """
    validate_key(key)
    state = backend()
    expires_at = expires_at_for(scope, ttl, state)
    version = state.write(scope, key, text, writer=writer, expires_at=expires_at, if_version=if_version)
    return Written(version, expires_at)


def increment(
    scope: StateScope,
    key: str,
    by: int = 1,
    *,
    ttl: Ttl = None,
    writer: StateWriter | None = None,
) -> Incremented:
    """
    Add *by* to the integer stored under *key* (absent: 0) in one atomic step; return the result.

    :raises ValueError: when the stored value is not a JSON integer, or the sum leaves 64 bits
        (nothing is written).
    :raises StateCapabilityError: on a backend without versions or increments, or for a ``ttl``
        it cannot honour.
    """
    validate_key(key)
    state = backend()
    expires_at = expires_at_for(scope, ttl, state)
    return Incremented(state.increment(scope, key, by, writer=writer, expires_at=expires_at), expires_at)


def parse_json_value(text: str) -> Any:
    """A value given as JSON text (the CLI's ``set KEY VALUE``); ``ValueError`` says what is wrong."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"the value must be JSON (a string needs quotes: '\"text\"'): {error.msg} at position {error.pos}"
        ) from None


def delete(scope: StateScope, key: str) -> None:
    validate_key(key)
    backend().delete(scope, key)


def clear(scope: StateScope, *, all_map_indices: bool = False) -> None:
    backend().clear(scope, all_map_indices=all_map_indices)
