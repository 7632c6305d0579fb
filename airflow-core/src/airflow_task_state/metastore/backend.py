"""The default backend: state in the Airflow metadata database."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_shared.state import BaseStateBackend, StagedCommit

from airflow_task_state.airflow_db import event_loop
from airflow_task_state.airflow_db.engine import committing_session
from airflow_task_state.metastore import cleanup as _cleanup
from airflow_task_state.metastore import listing
from airflow_task_state.metastore import operations as op
from airflow_task_state.metastore.operations import Work, adrive, drive
from airflow_task_state.metastore.statements import WRITE_PATHS, WritePath

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

T = TypeVar("T")


def _sync(build: Callable[..., Work[T]]) -> Callable[..., T]:
    """The sync method that runs what *build* makes of its arguments (the contract's, less ``session``)."""

    def method(self: MetastoreStateBackend, *args: Any, session: Session | None = None, **kwargs: Any) -> T:
        return drive(build(*args, **kwargs), session, self.write_path)

    return method


def _async(build: Callable[..., Work[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    """The async twin of :func:`_sync`."""

    async def method(
        self: MetastoreStateBackend, *args: Any, session: AsyncSession | None = None, **kwargs: Any
    ) -> T:
        return await adrive(build(*args, **kwargs), session, self.write_path)

    return method


def _on_event_loop(build: Callable[..., Work[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    """The method that runs what *build* makes of its arguments on the event loop (op.drive_on_event_loop)."""

    async def method(self: MetastoreStateBackend, *args: Any, **kwargs: Any) -> T:
        return await op.drive_on_event_loop(build(*args, **kwargs))

    return method


def _twins(build: Callable[..., Work[T]]) -> tuple[Callable[..., T], Callable[..., Coroutine[Any, Any, T]]]:
    """The sync method and its async twin, both running what *build* makes of their arguments."""
    return _sync(build), _async(build)


class DatabaseBackend(BaseStateBackend):
    """What the metastores of both Airflow lines declare, and how they apply a commit."""

    supports_versions = True
    supports_expiry = True
    supports_increment = True
    supports_atomic_many = True
    supports_session_transactions = True
    supports_atomic_commit = True

    def apply_commit(self, commit: StagedCommit, *, session: Session | None = None) -> bool:
        """The contract's commit, in one transaction: the caller's *session*, else one of its own."""
        if session is not None:
            return super().apply_commit(commit, session=session)
        # Committed at the end; everything is rolled back when a write raises.
        with committing_session() as own:
            return super().apply_commit(commit, session=own)


class MetastoreStateBackend(DatabaseBackend):
    """
    Task state in ``task_state``, asset state in ``asset_state`` (docs/metastore.md). Each method
    of the contract runs the operation of the same arguments
    (:mod:`airflow_task_state.metastore.operations`), sync or async.

    :param write_path: how writes hand back what they wrote (:data:`.statements.WritePath`). By
        default each connection's server decides: RETURNING, but LAST_INSERT_ID on MySQL. Naming
        one runs it on any server of its dialects (``last_insert_id``: MySQL's, MariaDB too).
    """

    def __init__(self, write_path: WritePath | None = None) -> None:
        if write_path is not None and write_path not in WRITE_PATHS:
            raise ValueError(
                f"write_path must be one of {', '.join(WRITE_PATHS)}, or None to follow the server, "
                f"not {write_path!r}"
            )
        self.write_path = write_path

    def serves_on_event_loop(self) -> bool:
        """Whether the ``*_on_event_loop`` methods may run (PostgreSQL, see airflow_db.event_loop)."""
        return self.write_path in (None, "returning") and event_loop.available()

    get, aget = _twins(op.get_value)
    get_versioned, aget_versioned = _twins(op.get_versioned)
    get_entry = _sync(op.get_entry)
    set, aset = _twins(op.upsert)
    set_by_try, aset_by_try = _twins(op.upsert)
    write, awrite = _twins(op.write)
    # Not of the contract: the state API's writes by a running try, their check in the statement.
    write_while_running = _sync(op.write_while_running)
    # And its plain reads and writes on the API server's event loop, where serves_on_event_loop().
    get_versioned_on_event_loop = _on_event_loop(op.get_versioned)
    write_while_running_on_event_loop = _on_event_loop(op.write_while_running)
    increment_while_running = _sync(op.increment_while_running)
    increment, aincrement = _twins(op.increment)
    get_many, aget_many = _twins(op.get_many)
    set_many, aset_many = _twins(op.set_many)
    delete_many, adelete_many = _twins(op.delete_many)
    delete, adelete = _twins(op.delete_key)
    clear, aclear = _twins(op.clear)
    discard_written_through_try = _sync(op.discard_written_through_try)
    keys, akeys = _twins(op.list_keys)

    # The listings run as ordinary queries on a session, and the clean-up on sessions of its own
    # per batch, whatever *session* is given: a caller's transaction would hold every batch's
    # locks to its end.
    entries = staticmethod(listing.entries)
    key_counts = staticmethod(listing.key_counts)
    cleanup = staticmethod(_cleanup.cleanup)


__all__ = ["MetastoreStateBackend"]
