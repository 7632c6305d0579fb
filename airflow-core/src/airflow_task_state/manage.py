"""
What operators do to state, shared by the REST API and the CLI so that both refuse the same things
with the same words: :class:`NotFound` for a dag run, task instance, asset or key that does not
exist; ``ValueError``/``TypeError`` from the shared validators or the codec. Writes made here record
no try: the caller says whose they are (``API_WRITER``, ``CLI_WRITER``).

Reads and writes follow one rule where a clear left keys for a task instance's next try to discard:
reads do not show them, and a write first applies that discard (see :func:`settle_pending_discard`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_shared.state import (
    AssetScope,
    BaseStateBackend,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    TaskScope,
    validate_increment,
    validate_key,
    validate_listing,
    validate_value,
    validate_write,
)

from airflow_task_state import codec
from airflow_task_state.airflow_db.clears import pending_boundaries, runs_with_archived_tries
from airflow_task_state.airflow_db.lookups import (
    AssetInfo,
    NotFound,
    every_asset,
    find_asset,
    find_dag_run_uid,
    find_task_scope,
    task_scopes_of_run,
)
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.expiry import Ttl, expires_at_for
from airflow_task_state.protocol import Reason

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sqlalchemy.orm import Session

# Re-exported: the REST API and the CLI name Airflow's tables through this module.
__all__ = ["AssetInfo", "NotFound", "find_asset", "find_task_scope"]


@dataclass(frozen=True)
class TaskInstanceKeyCount:
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
    #: ``None`` when the backend keeps no versions.
    version: int | None = None
    #: ``None``: never (or the backend does not support expiry).
    expires_at: datetime | None = None
    #: Who last wrote it; asset state only.
    updated_by: StateWriter | None = None

    @classmethod
    def of(cls, entry: StateEntry) -> Entry:
        try:
            value = codec.decode(entry.value)
        except ValueError:
            # Not JSON (server code wrote straight through a backend): shown as the string it is.
            value = entry.value
        return cls(
            entry.key,
            value,
            entry.updated_at,
            entry.updated_by_try,
            entry.version,
            entry.expires_at,
            entry.writer,
        )


def entries(
    scope: StateScope, *, key_prefix: str | None = None, offset: int = 0, limit: int | None = None
) -> tuple[list[Entry], int]:
    """A page of the scope's entries (values decoded), and how many keys matched in all."""
    boundary = pending_discard(scope)
    if boundary is None:
        page = get_state_backend().entries(scope, key_prefix=key_prefix, offset=offset, limit=limit)
    else:  # the whole listing, less what the try a clear started will discard, then the page
        validate_listing(key_prefix, offset, limit)
        page = get_state_backend().entries(scope, key_prefix=key_prefix)
        live = [entry for entry in page.entries if not _discarded(entry, boundary)]
        page = StateEntryPage(live[offset : None if limit is None else offset + limit], len(live))
    return [Entry.of(entry) for entry in page.entries], page.total


def entry(scope: StateScope, key: str) -> Entry:
    """One entry, with what the backend records of its last write; :class:`NotFound` when missing."""
    found = get_state_backend().get_entry(scope, key)  # one key read, not a listing of the scope
    if found is not None and not _discarded(found, pending_discard(scope)):
        return Entry.of(found)
    raise NotFound(Reason.KEY_NOT_FOUND, f"no state stored under key {key!r}")


def task_instances_with_state(dag_id: str, run_id: str, session: Session) -> list[TaskInstanceKeyCount]:
    """The task instances of the run that hold state, sorted by task id and map index."""
    scopes = task_scopes_of_run(dag_id, run_id, session)
    state = get_state_backend()
    counts = state.key_counts(scopes)
    boundaries = pending_boundaries(dag_id, run_id, session) if any(counts) else {}
    for position, scope in enumerate(scopes):
        boundary = boundaries.get((scope.task_id, scope.map_index))
        if counts[position] and boundary is not None:  # counted again, less what a clear discards
            counts[position] = sum(not _discarded(entry, boundary) for entry in state.entries(scope).entries)
    return [TaskInstanceKeyCount(scope, count) for scope, count in zip(scopes, counts, strict=True) if count]


# --- what a clear discards, not shown as if it were live ---------------------------------------
# A clear leaves the keys in place until the task instance's next try first touches state (see
# airflow_db/clears.py); until then operators see the task instance's state as that try will.


def pending_discard(scope: StateScope) -> int | None:
    """The discard boundary a clear left for the task instance *scope*'s next try, or ``None``."""
    if not isinstance(scope, TaskScope):
        return None
    found = pending_boundaries(scope.dag_id, scope.run_id, task_id=scope.task_id, map_index=scope.map_index)
    return found.get((scope.task_id, scope.map_index))


def _discarded(entry: StateEntry, boundary: int | None) -> bool:
    return boundary is not None and entry.updated_by_try is not None and entry.updated_by_try <= boundary


def holds(scope: StateScope, key: str, boundary: int | None) -> bool:
    """Whether *scope* holds *key* as operators see it, *boundary* being :func:`pending_discard`'s."""
    found = get_state_backend().get_entry(scope, key)
    return found is not None and not _discarded(found, boundary)


def settle_pending_discard(
    scope: StateScope, boundary: int | None, *, session: Session | None = None
) -> None:
    """
    Apply the discard a clear left for the task instance's next try (*boundary*, from
    :func:`pending_discard`) before an operator writes to it, as that try's first touch would: the
    write then acts on the state operators read. A key they do not see is gone (``if_version=0``
    holds, an increment starts from 0), and the write, which records no try, is not taken by that
    try's discard. A try touching state meanwhile runs the same discard, which removes nothing twice.
    """
    if boundary is not None:
        assert isinstance(scope, TaskScope)  # only task state has tries to discard
        get_state_backend().discard_written_through_try(scope, boundary, session=session)


def _settle(scope: StateScope, by_running_try: bool) -> None:
    # A running try's own write has nothing to settle: its first touch applied the discard before
    # it got its credential (airflow_db/first_touch.py), and a clear since ended that credential's
    # try, whose writes are refused. Looking again would cost up to three queries on every write.
    if not by_running_try:
        settle_pending_discard(scope, pending_discard(scope))


def discard_what_clears_left(
    session: Session, *, dry_run: bool, counted_before: datetime | None = None
) -> int:
    """
    Remove (*dry_run*: count) the keys that clears left for each task instance's next try to
    discard, which operators already do not see; that try's first touch then removes nothing. Run
    before an upgrade to Airflow 3.3, which would hand them to that try as live keys. A dry run
    leaves out keys last written before *counted_before*: the cleanup by age that runs first
    counted them already.
    """
    state = get_state_backend()
    found = 0
    for dag_id, run_id in runs_with_archived_tries(session):
        try:  # one lookup per run: the instances pending_boundaries names exist
            uid = find_dag_run_uid(dag_id, run_id, session)
        except NotFound:  # deleted since it was listed, its state with it
            continue
        for (task_id, map_index), boundary in pending_boundaries(dag_id, run_id, session).items():
            scope = TaskScope(dag_id, run_id, task_id, map_index, dag_run_uid=uid)
            if not dry_run:
                found += state.discard_written_through_try(scope, boundary)
                continue
            try:
                entries = state.entries(scope).entries
            except NotImplementedError:  # as the discard itself: nothing records which try wrote a key
                continue
            found += sum(
                _discarded(entry, boundary) and not _written_before(entry, counted_before)
                for entry in entries
            )
    return found


def _written_before(entry: StateEntry, moment: datetime | None) -> bool:
    return moment is not None and entry.updated_at is not None and entry.updated_at < moment


def assets_with_state(session: Session) -> list[tuple[AssetInfo, int]]:
    """Every asset that holds state, with its key count, sorted by name and URI."""
    assets = every_asset(session)
    counts = get_state_backend().key_counts([AssetScope(asset.asset_id) for asset in assets])
    return [(asset, count) for asset, count in zip(assets, counts, strict=True) if count]


class Written(NamedTuple):
    """What a write stored: the key's new version (``None`` without versions) and expiry."""

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
    by_running_try: bool = False,
) -> Written:
    """
    Store *text* (from :func:`.codec.encode`) under *key* as *writer*, as the backend's ``write``;
    *by_running_try*: the writer is the task instance's running try, whose first touch is done.
    """
    expires_at = _checked_write(scope, key, text, ttl, writer, if_version)
    _settle(scope, by_running_try)
    version = get_state_backend().write(
        scope, key, text, writer=writer, expires_at=expires_at, if_version=if_version
    )
    return Written(version, expires_at)


def put_while_running(
    scope: TaskScope, key: str, text: str, *, ttl: Ttl = None, writer: StateWriter, ti_id: str
) -> Written | None:
    """
    :func:`put` by *writer*, the running try of task instance *ti_id*, where the backend checks in
    the write's own statement that the try still runs (``write_while_running``: the metastore, on
    Airflow 3.3 with PostgreSQL only): ``None``, nothing written, when the backend cannot, and the
    caller checks the try, then puts. Raises
    :class:`~airflow_task_state.exceptions.TryNotRunning` when it wrote nothing.
    """
    write_while_running = getattr(get_state_backend(), "write_while_running", None)
    if write_while_running is None:
        return None
    expires_at = _checked_write(scope, key, text, ttl, writer, None)
    version = write_while_running(scope, key, text, writer, expires_at, ti_id)
    return None if version is None else Written(version, expires_at)


def on_event_loop(backend: BaseStateBackend, method: str) -> Callable[..., Awaitable[Any]] | None:
    """
    *backend*'s ``<method>_on_event_loop`` where it runs on the API server's event loop now (the
    metastore on PostgreSQL, see :mod:`~airflow_task_state.airflow_db.event_loop`), else ``None``.
    """
    serves = getattr(backend, "serves_on_event_loop", None)
    return getattr(backend, f"{method}_on_event_loop", None) if serves is not None and serves() else None


async def put_on_event_loop(
    scope: TaskScope, key: str, text: str, *, ttl: Ttl = None, writer: StateWriter, ti_id: str
) -> Written | None:
    """
    :func:`put_while_running` on the API server's event loop (``write_while_running_on_event_loop``:
    the metastore of Airflow 3.2 on PostgreSQL): ``None``, nothing written, when the backend cannot.
    Raises :class:`~airflow_task_state.exceptions.TryNotRunning` when it wrote nothing.
    """
    write = on_event_loop(get_state_backend(), "write_while_running")
    if write is None:
        return None
    expires_at = _checked_write(scope, key, text, ttl, writer, None)
    return Written(await write(scope, key, text, writer, expires_at, ti_id), expires_at)


def _checked_write(
    scope: StateScope, key: str, text: str, ttl: Ttl, writer: StateWriter | None, if_version: int | None
) -> datetime | None:
    """The expiry of a write of *text* under *key*, each argument checked as the backend's ``write`` does."""
    validate_key(key)
    expires_at = expires_at_for(scope, ttl, get_state_backend())
    validate_value(text)
    validate_write(writer, expires_at, if_version)  # refused before the discard, as before any write
    return expires_at


def increment(
    scope: StateScope,
    key: str,
    by: int = 1,
    *,
    ttl: Ttl = None,
    writer: StateWriter | None = None,
    by_running_try: bool = False,
) -> Incremented:
    """Add *by* to the integer under *key* (absent: 0) atomically, as the backend's ``increment``."""
    expires_at = _checked_increment(scope, key, by, ttl, writer)
    _settle(scope, by_running_try)
    added = get_state_backend().increment(scope, key, by, writer=writer, expires_at=expires_at)
    return Incremented(added, expires_at)


def increment_while_running(
    scope: TaskScope, key: str, by: int = 1, *, ttl: Ttl = None, writer: StateWriter, ti_id: str
) -> Incremented | None:
    """
    :func:`increment` as :func:`put_while_running` puts (``increment_while_running``: the metastore
    on Airflow 3.2 only): ``None`` when the backend cannot; raises
    :class:`~airflow_task_state.exceptions.TryNotRunning` when it added nothing.
    """
    increment_while_running = getattr(get_state_backend(), "increment_while_running", None)
    if increment_while_running is None:
        return None
    expires_at = _checked_increment(scope, key, by, ttl, writer)
    return Incremented(increment_while_running(scope, key, by, writer, expires_at, ti_id), expires_at)


def _checked_increment(
    scope: StateScope, key: str, by: int, ttl: Ttl, writer: StateWriter | None
) -> datetime | None:
    """The expiry of an increment, each argument checked as the backend's ``increment`` does."""
    validate_key(key)
    expires_at = expires_at_for(scope, ttl, get_state_backend())
    validate_increment(by)
    validate_write(writer, expires_at)  # refused before the discard, as before any write
    return expires_at


def delete(scope: StateScope, key: str, *, by_running_try: bool = False) -> None:
    validate_key(key)
    _settle(scope, by_running_try)
    get_state_backend().delete(scope, key)


def clear(scope: StateScope, *, all_map_indices: bool = False) -> None:
    # Nothing to settle first: a clear removes every key, those a discard would take too.
    get_state_backend().clear(scope, all_map_indices=all_map_indices)
