"""The default backend: state in the Airflow metadata database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow.state.metastore import listing
from airflow.state.metastore import operations as op
from airflow.state.metastore.operations import arun, run
from airflow_shared.state import BaseStateBackend, StateEntryPage, StateScope

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session


class MetastoreStateBackend(BaseStateBackend):
    """
    Keeps task state in ``task_state`` and asset state in ``asset_state``.

    Sync methods join a caller's ``session`` (and leave committing to the caller); without one each
    call is a single statement committed on its own. Async methods run on Airflow's async engine.
    Every write records which try wrote it (``updated_by_try``, NULL for writes made outside a
    task try). Deleting a dag run or an asset deletes its state by foreign-key cascade.

    Each method names its operation (:mod:`airflow.state.metastore.operations`) and runs it.
    """

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

    async def adelete(self, scope: StateScope, key: str, *, session: AsyncSession | None = None) -> None:
        await arun(op.delete_key(scope, key), session)

    async def aclear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: AsyncSession | None = None
    ) -> None:
        await arun(op.clear(scope, all_map_indices=all_map_indices), session)

    async def akeys(self, scope: StateScope, *, session: AsyncSession | None = None) -> list[str]:
        return await arun(op.list_keys(scope), session)


__all__ = ["MetastoreStateBackend"]
