"""The default backend: state in the Airflow metadata database."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.state.metastore import cleanup as _cleanup
from airflow.state.metastore import listing
from airflow.state.metastore import operations as op
from airflow.state.metastore.operations import adrive, arun, drive, run
from airflow_shared.state import (
    BaseStateBackend,
    StateEntry,
    StateEntryPage,
    StateScope,
    StateWriter,
    VersionedValue,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session


class MetastoreStateBackend(BaseStateBackend):
    """
    Keeps task state in ``task_state`` and asset state in ``asset_state``.

    Sync methods join a caller's ``session`` (and leave committing to the caller); without one each
    call is a single statement committed on its own. Async methods run on Airflow's async engine.
    Every task state write records which try wrote it (``updated_by_try``, NULL for writes made
    outside a task try). Deleting a dag run or an asset deletes its state by foreign-key cascade.

    Every key has a version (1 when created, one more on every write) and an optional expiry;
    expired keys are invisible to every read at once, and :meth:`cleanup` removes them. Asset
    state records its last writer (``updated_by*``). Conditional writes and increments are single
    statements in the usual case (see :mod:`airflow.state.metastore.statements`).

    Each method names its operation (:mod:`airflow.state.metastore.operations`) and runs it.
    """

    supports_versions = True
    supports_expiry = True
    supports_increment = True
    supports_atomic_many = True
    supports_session_transactions = True

    # --- sync --------------------------------------------------------------------------

    def get(self, scope: StateScope, key: str, *, session: Session | None = None) -> str | None:
        return run(op.get_value(scope, key), session)

    def set(self, scope: StateScope, key: str, value: str, *, session: Session | None = None) -> None:
        run(op.upsert(scope, key, value, try_number=None), session)

    def set_by_try(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        try_number: int | None,
        session: Session | None = None,
    ) -> None:
        run(op.upsert(scope, key, value, try_number=try_number), session)

    def write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Session | None = None,
    ) -> int:
        return drive(op.write(scope, key, value, writer, expires_at, if_version), session)

    def get_versioned(
        self, scope: StateScope, key: str, *, session: Session | None = None
    ) -> VersionedValue | None:
        return run(op.get_versioned(scope, key), session)

    def increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Session | None = None,
    ) -> int:
        return drive(op.increment(scope, key, by, writer, expires_at), session)

    def get_many(
        self, scope: StateScope, keys: Iterable[str], *, session: Session | None = None
    ) -> dict[str, str]:
        operation = op.get_many(scope, keys)
        return {} if operation is None else run(operation, session)

    def set_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Session | None = None,
    ) -> dict[str, int | None]:
        operation = op.set_many(scope, values, writer, expires_at)
        return {} if operation is None else run(operation, session)

    def delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Session | None = None) -> None:
        operation = op.delete_many(scope, keys)
        if operation is not None:
            run(operation, session)

    def cleanup(
        self,
        *,
        now: datetime,
        updated_before: datetime | None = None,
        batch_size: int = 1000,
        dry_run: bool = False,
        session: Any = None,
    ) -> int:
        """
        See :meth:`BaseStateBackend.cleanup`. Each batch commits on a session of its own, whatever
        *session* is given: a caller's transaction would hold every batch's locks to its end.
        """
        return _cleanup.cleanup(
            now=now, updated_before=updated_before, batch_size=batch_size, dry_run=dry_run
        )

    def delete(self, scope: StateScope, key: str, *, session: Session | None = None) -> None:
        run(op.delete_key(scope, key), session)

    def clear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: Session | None = None
    ) -> None:
        run(op.clear(scope, all_map_indices=all_map_indices), session)

    def keys(self, scope: StateScope, *, session: Session | None = None) -> list[str]:
        return run(op.list_keys(scope), session)

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Session | None = None,
    ) -> StateEntryPage:
        return listing.entries(scope, key_prefix, offset, limit, session)

    def get_entry(self, scope: StateScope, key: str, *, session: Session | None = None) -> StateEntry | None:
        return run(op.get_entry(scope, key), session)

    def key_counts(self, scopes: Sequence[StateScope], *, session: Session | None = None) -> list[int]:
        return listing.key_counts(scopes, session)

    # --- async -------------------------------------------------------------------------

    async def aget(self, scope: StateScope, key: str, *, session: AsyncSession | None = None) -> str | None:
        return await arun(op.get_value(scope, key), session)

    async def aset(
        self, scope: StateScope, key: str, value: str, *, session: AsyncSession | None = None
    ) -> None:
        await arun(op.upsert(scope, key, value, try_number=None), session)

    async def aset_by_try(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        try_number: int | None,
        session: AsyncSession | None = None,
    ) -> None:
        await arun(op.upsert(scope, key, value, try_number=try_number), session)

    async def awrite(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: AsyncSession | None = None,
    ) -> int:
        return await adrive(op.write(scope, key, value, writer, expires_at, if_version), session)

    async def aget_versioned(
        self, scope: StateScope, key: str, *, session: AsyncSession | None = None
    ) -> VersionedValue | None:
        return await arun(op.get_versioned(scope, key), session)

    async def aincrement(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: AsyncSession | None = None,
    ) -> int:
        return await adrive(op.increment(scope, key, by, writer, expires_at), session)

    async def aget_many(
        self, scope: StateScope, keys: Iterable[str], *, session: AsyncSession | None = None
    ) -> dict[str, str]:
        operation = op.get_many(scope, keys)
        return {} if operation is None else await arun(operation, session)

    async def aset_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: AsyncSession | None = None,
    ) -> dict[str, int | None]:
        operation = op.set_many(scope, values, writer, expires_at)
        return {} if operation is None else await arun(operation, session)

    async def adelete_many(
        self, scope: StateScope, keys: Iterable[str], *, session: AsyncSession | None = None
    ) -> None:
        operation = op.delete_many(scope, keys)
        if operation is not None:
            await arun(operation, session)

    async def adelete(self, scope: StateScope, key: str, *, session: AsyncSession | None = None) -> None:
        await arun(op.delete_key(scope, key), session)

    async def aclear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: AsyncSession | None = None
    ) -> None:
        await arun(op.clear(scope, all_map_indices=all_map_indices), session)

    async def akeys(self, scope: StateScope, *, session: AsyncSession | None = None) -> list[str]:
        return await arun(op.list_keys(scope), session)


__all__ = ["MetastoreStateBackend"]
