"""The default backend: state in the Airflow metadata database."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.state.metastore import statements as sql
from airflow.state.metastore.engine import Outcome, execute
from airflow.utils.session import create_session_async
from airflow_shared.state import (
    BaseStateBackend,
    StateScope,
    TaskScope,
    validate_key,
    validate_scope,
    validate_value,
)

if TYPE_CHECKING:
    from sqlalchemy import CursorResult, Executable
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session


def _checked(scope: StateScope, key: str, value: Any = None, *, is_write: bool = False) -> None:
    validate_scope(scope)
    validate_key(key)
    if is_write:
        validate_value(value)


def _scalar(outcome: Outcome) -> Any:
    return outcome.rows[0][0] if outcome.rows else None


def _sorted_keys(outcome: Outcome) -> list[str]:
    # Sorted here, not in SQL: database collations order text differently from each other.
    return sorted(row[0] for row in outcome.rows)


def _wrote(outcome: Outcome) -> bool:
    # An upsert writes nothing when its SELECT finds no dag run (or asset).
    return outcome.rowcount > 0


def _outcome(result: CursorResult[Any]) -> Outcome:
    return Outcome(list(result.tuples()) if result.returns_rows else [], result.rowcount)


def _upsert_values(scope: StateScope, key: str, value: str, try_number: int | None) -> dict[str, Any]:
    values = sql.params(scope, key)
    values["value"] = value
    values["updated_at"] = datetime.now(timezone.utc)
    if isinstance(scope, TaskScope):
        values["updated_by_try"] = try_number
    return values


def _no_target_error(scope: StateScope) -> ValueError:
    if isinstance(scope, TaskScope):
        return ValueError(
            f"No DagRun found for dag_id={scope.dag_id!r}, run_id={scope.run_id!r}: task state can "
            "only be written for an existing dag run"
        )
    return ValueError(
        f"No asset found with id {scope.asset_id}: asset state can only be written for an existing asset"
    )


class MetastoreStateBackend(BaseStateBackend):
    """
    Keeps task state in ``task_state`` and asset state in ``asset_state``.

    Sync methods join a caller's ``session`` (and leave committing to the caller); without one each
    call is a single statement committed on its own. Async methods run on Airflow's async engine.
    Deleting a dag run or an asset deletes its state by foreign-key cascade.
    """

    # --- sync --------------------------------------------------------------------------

    def get(self, scope: StateScope, key: str, *, session: Session | None = None) -> str | None:
        _checked(scope, key)
        return _scalar(self._execute(sql.select_value(type(scope)), sql.params(scope, key), session))

    def set(self, scope: StateScope, key: str, value: str, *, session: Session | None = None) -> None:
        self.set_by_try(scope, key, value, try_number=None, session=session)

    def set_by_try(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        try_number: int | None,
        session: Session | None = None,
    ) -> None:
        """:meth:`set`, recording which try of the task instance wrote the value."""
        _checked(scope, key, value, is_write=True)
        values = _upsert_values(scope, key, value, try_number)
        if not _wrote(self._execute(sql.upsert(type(scope)), values, session)):
            raise _no_target_error(scope)

    def delete(self, scope: StateScope, key: str, *, session: Session | None = None) -> None:
        _checked(scope, key)
        self._execute(sql.delete_rows(type(scope), one_key=True), sql.params(scope, key), session)

    def clear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: Session | None = None
    ) -> None:
        validate_scope(scope)
        statement = sql.delete_rows(type(scope), one_key=False, all_map_indices=all_map_indices)
        self._execute(statement, sql.params(scope), session)

    def keys(self, scope: StateScope, *, session: Session | None = None) -> list[str]:
        validate_scope(scope)
        return _sorted_keys(self._execute(sql.select_keys(type(scope)), sql.params(scope), session))

    # --- async -------------------------------------------------------------------------

    async def aget(self, scope: StateScope, key: str, *, session: AsyncSession | None = None) -> str | None:
        _checked(scope, key)
        return _scalar(await self._aexecute(sql.select_value(type(scope)), sql.params(scope, key), session))

    async def aset(
        self, scope: StateScope, key: str, value: str, *, session: AsyncSession | None = None
    ) -> None:
        _checked(scope, key, value, is_write=True)
        values = _upsert_values(scope, key, value, try_number=None)
        if not _wrote(await self._aexecute(sql.upsert(type(scope)), values, session)):
            raise _no_target_error(scope)

    async def adelete(self, scope: StateScope, key: str, *, session: AsyncSession | None = None) -> None:
        _checked(scope, key)
        await self._aexecute(sql.delete_rows(type(scope), one_key=True), sql.params(scope, key), session)

    async def aclear(
        self, scope: StateScope, *, all_map_indices: bool = False, session: AsyncSession | None = None
    ) -> None:
        validate_scope(scope)
        statement = sql.delete_rows(type(scope), one_key=False, all_map_indices=all_map_indices)
        await self._aexecute(statement, sql.params(scope), session)

    async def akeys(self, scope: StateScope, *, session: AsyncSession | None = None) -> list[str]:
        validate_scope(scope)
        return _sorted_keys(await self._aexecute(sql.select_keys(type(scope)), sql.params(scope), session))

    # --- plumbing ----------------------------------------------------------------------

    @staticmethod
    def _execute(statement: Executable, values: dict[str, Any], session: Session | None) -> Outcome:
        if session is not None:
            return _outcome(session.execute(statement, values))
        return execute(statement, values)

    @staticmethod
    async def _aexecute(
        statement: Executable, values: dict[str, Any], session: AsyncSession | None
    ) -> Outcome:
        if session is not None:
            return _outcome(await session.execute(statement, values))
        async with create_session_async() as own_session:
            return _outcome(await own_session.execute(statement, values))


__all__ = ["MetastoreStateBackend"]
