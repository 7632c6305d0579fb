"""
Every metastore operation, defined once, and the two ways of running one.

An :class:`Operation` is what one backend call sends and how its answer is read: a statement of
:mod:`~airflow.state.metastore.statements`, its parameters, and a function of the
:class:`~airflow.state.metastore.engine.Outcome`. The functions that build operations validate
their input first, so bad input never reaches a database. :func:`run` sends an operation on a
caller's ``Session``, or else as one autocommitted statement on the hot path
(:func:`~airflow.state.metastore.engine.execute`); :func:`arun` on a caller's ``AsyncSession``, or
else on a session of its own from Airflow's async engine. The backend's sync and async methods
differ only in which of the two they call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar, assert_never, cast

from airflow._shared.timezones import timezone
from airflow.state.metastore import statements
from airflow.state.metastore.engine import Outcome, execute
from airflow.utils.session import create_session_async
from airflow_shared.state import (
    AssetScope,
    StateScope,
    TaskScope,
    validate_key,
    validate_scope,
    validate_value,
)

if TYPE_CHECKING:
    from sqlalchemy import CursorResult, Executable, Result
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

T = TypeVar("T")


class Operation(Generic[T]):
    """One statement with its parameters, and how to read what it returned."""

    __slots__ = ("read", "statement", "values")

    def __init__(self, statement: Executable, values: dict[str, Any], read: Callable[[Outcome], T]) -> None:
        self.statement = statement
        self.values = values
        self.read = read


# --- reading outcomes ----------------------------------------------------------------------


def _first_value(outcome: Outcome) -> str | None:
    return outcome.rows[0][0] if outcome.rows else None


def _sorted_keys(outcome: Outcome) -> list[str]:
    # Sorted here, not in SQL: database collations order text differently from each other.
    return sorted(row[0] for row in outcome.rows)


def _ignored(outcome: Outcome) -> None:
    return None


def _written(scope: StateScope, outcome: Outcome) -> None:
    # An upsert writes nothing when its SELECT finds no dag run (or asset).
    if outcome.rowcount > 0:
        return
    match scope:
        case TaskScope():
            raise ValueError(
                f"No DagRun found for dag_id={scope.dag_id!r}, run_id={scope.run_id!r}: task state can "
                "only be written for an existing dag run"
            )
        case AssetScope():
            raise ValueError(
                f"No asset found with id {scope.asset_id}: asset state can only be written for an "
                "existing asset"
            )
        case _:
            assert_never(scope)


# --- the operations ------------------------------------------------------------------------


def get_value(scope: StateScope, key: str) -> Operation[str | None]:
    validate_scope(scope)
    validate_key(key)
    return Operation(statements.for_scope(scope).select_value, statements.params(scope, key), _first_value)


def upsert(scope: StateScope, key: str, value: str, try_number: int | None) -> Operation[None]:
    """Store *value*; *try_number* is recorded for task scopes (``updated_by_try``)."""
    validate_scope(scope)
    validate_key(key)
    validate_value(value)
    values = statements.params(scope, key)
    values["value"] = value
    # Given here, not left to the model's default: the hot path sends no ORM defaults.
    values["updated_at"] = timezone.utcnow()
    match scope:
        case TaskScope():
            values["updated_by_try"] = try_number
        case AssetScope():
            pass
        case _:
            assert_never(scope)
    return Operation(statements.for_scope(scope).upsert, values, partial(_written, scope))


def delete_key(scope: StateScope, key: str) -> Operation[None]:
    validate_scope(scope)
    validate_key(key)
    return Operation(statements.for_scope(scope).delete_key, statements.params(scope, key), _ignored)


def clear(scope: StateScope, *, all_map_indices: bool) -> Operation[None]:
    validate_scope(scope)
    sql = statements.for_scope(scope)
    return Operation(
        sql.clear_all_map_indices if all_map_indices else sql.clear, statements.params(scope), _ignored
    )


def list_keys(scope: StateScope) -> Operation[list[str]]:
    validate_scope(scope)
    return Operation(statements.for_scope(scope).select_keys, statements.params(scope), _sorted_keys)


# --- running them --------------------------------------------------------------------------


def _outcome(result: Result[Any]) -> Outcome:
    # Session.execute() is typed as returning a Result; for these statements it is a CursorResult.
    cursor = cast("CursorResult[Any]", result)
    return Outcome(list(cursor.tuples()) if cursor.returns_rows else [], cursor.rowcount)


def run(operation: Operation[T], session: Session | None) -> T:
    """Run *operation* in *session* (the caller commits), or autocommitted on its own without one."""
    if session is None:
        return operation.read(execute(operation.statement, operation.values))
    return operation.read(_outcome(session.execute(operation.statement, operation.values)))


async def arun(operation: Operation[T], session: AsyncSession | None) -> T:
    """Run *operation* in *session* (the caller commits), or in a session of its own, committed."""
    if session is not None:
        return operation.read(_outcome(await session.execute(operation.statement, operation.values)))
    async with create_session_async() as own_session:
        return operation.read(_outcome(await own_session.execute(operation.statement, operation.values)))
