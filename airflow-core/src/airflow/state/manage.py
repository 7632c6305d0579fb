"""
What operators do to state, shared by the REST API (``api/operator``) and the CLI (``cli``).

Both address state the way people name it (a dag run by dag id and run id, an asset by id, name or
URI: :mod:`.airflow_db.lookups`), on the configured backend, and both must refuse the same things
with the same words: a dag run, task instance, asset or key that does not exist raises
:class:`NotFound`; a bad key or value raises ``ValueError``/``TypeError`` from the shared validators
or the codec. Writes made here name no try (``updated_by_try`` stays empty): they are an
operator's, not a task's, and the caller says whose (``API_WRITER``, ``CLI_WRITER``), which asset
state records. A write's ``ttl`` is applied by :func:`.expiry.expires_at_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.state import codec
from airflow.state.airflow_db.lookups import (
    AssetInfo,
    NotFound,
    every_asset,
    find_asset,
    matching_assets,
    task_scope,
    task_scope_of_every_map_index,
    task_scopes_of_run,
)
from airflow.state.configured_backend import get_state_backend
from airflow.state.expiry import Ttl, expires_at_for
from airflow.state.protocol import Reason
from airflow_shared.state import AssetScope, StateEntry, StateScope, StateWriter, TaskScope, validate_key

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# What the REST API and the CLI use; the names of Airflow's tables come from the lookups.
__all__ = [
    "AssetInfo",
    "Entry",
    "Incremented",
    "NotFound",
    "TaskInstanceState",
    "Written",
    "assets_with_state",
    "clear",
    "decode",
    "delete",
    "entries",
    "entry",
    "find_asset",
    "increment",
    "matching_assets",
    "put",
    "task_instances_with_state",
    "task_scope",
    "task_scope_of_every_map_index",
]


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


def decode(text: str) -> Any:
    """
    The JSON value of stored *text*. Text that is not JSON (written by server code straight through
    a backend, not through the task accessors) is shown as the string it is rather than failing.
    """
    try:
        return codec.decode(text)
    except ValueError:
        return text


# --- reading ------------------------------------------------------------------------------------


def entries(
    scope: StateScope, *, key_prefix: str | None = None, offset: int = 0, limit: int | None = None
) -> tuple[list[Entry], int]:
    """A page of the scope's entries (values decoded), and how many keys matched in all."""
    page = get_state_backend().entries(scope, key_prefix=key_prefix, offset=offset, limit=limit)
    return [Entry.of(entry) for entry in page.entries], page.total


def entry(scope: StateScope, key: str) -> Entry:
    """One entry, with what the backend records of its last write; :class:`NotFound` when missing."""
    found = get_state_backend().get_entry(scope, key)  # one key read, not a listing of the scope
    if found is not None:
        return Entry.of(found)
    raise NotFound(Reason.KEY_NOT_FOUND, f"no state stored under key {key!r}")


def task_instances_with_state(dag_id: str, run_id: str, session: Session) -> list[TaskInstanceState]:
    """The task instances of the run that hold state, sorted by task id and map index."""
    scopes = task_scopes_of_run(dag_id, run_id, session)
    counts = get_state_backend().key_counts(scopes)
    return [TaskInstanceState(scope, count) for scope, count in zip(scopes, counts, strict=True) if count]


def assets_with_state(session: Session) -> list[tuple[AssetInfo, int]]:
    """Every asset that holds state, with its key count, sorted by name and URI."""
    assets = every_asset(session)
    counts = get_state_backend().key_counts([AssetScope(asset.asset_id) for asset in assets])
    return [(asset, count) for asset, count in zip(assets, counts, strict=True) if count]


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
    state = get_state_backend()
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
    state = get_state_backend()
    expires_at = expires_at_for(scope, ttl, state)
    return Incremented(state.increment(scope, key, by, writer=writer, expires_at=expires_at), expires_at)


def delete(scope: StateScope, key: str) -> None:
    validate_key(key)
    get_state_backend().delete(scope, key)


def clear(scope: StateScope, *, all_map_indices: bool = False) -> None:
    get_state_backend().clear(scope, all_map_indices=all_map_indices)
