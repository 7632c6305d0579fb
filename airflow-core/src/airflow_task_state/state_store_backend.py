"""
Airflow 3.3's ``[state_store] backend`` for a deployment that runs this package
(``[state_store] backend = airflow_task_state.state_store_backend.StateStoreBackend``): Airflow's own
task accessors (``context["task_state_store"]``, ``context["asset_state_store"]``), its Execution
API and ``airflow state-store clean`` then use the backend ``[state] backend`` names, by its rules:
expired keys are never returned, the try that writes a key is recorded (so a clear treats it as ours),
a try finds what a clear left discarded whichever API it asks first, and with Redis both APIs share
one store (docs/airflow-lines.md).

It subclasses Airflow's own metastore backend for two things only Airflow's code grants that class:
``airflow state-store clean`` cleans no other, and Airflow's Execution API tells only it who wrote an
asset's key. Every method Airflow calls is overridden here.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from airflow_shared.state import AssetScope, StateScope, StateWriter, TaskScope

from airflow_task_state.configured_backend import get_state_backend

try:
    # Airflow 3.3's state store; mypy checks this module against Airflow 3.3 (dev/test).
    from airflow._shared.state import AssetScope as AirflowAssetScope  # type: ignore[import-not-found,unused-ignore]
    from airflow.state.metastore import MetastoreBackend  # type: ignore[import-not-found,unused-ignore]
except ImportError as error:
    raise ImportError(
        "airflow_task_state.state_store_backend.StateStoreBackend is Airflow 3.3's [state_store] backend: "
        f"this Airflow has no state store of its own ({error}). On Airflow 3.2 set [state] backend only."
    ) from error

__all__ = ["StateStoreBackend"]


def _ours(scope: Any, session: Any, *, required: bool = False) -> StateScope | None:
    """
    Our scope for Airflow's: a task scope with its dag run's identity (``None`` when the run does not
    exist, or ``ValueError`` when *required*); an asset scope by id, the only way Airflow's servers
    name an asset.
    """
    if isinstance(scope, AirflowAssetScope):
        if scope.asset_id is None:
            raise ValueError(
                f"{__name__}.StateStoreBackend runs on the API server, which names assets by id; this "
                f"AssetScope has only name={scope.name!r} / uri={scope.uri!r}: it cannot be a "
                "[workers] state_store_backend"
            )
        return AssetScope(scope.asset_id)
    from airflow_task_state.airflow_db.run_identity import task_scope

    try:
        return task_scope(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, session=session)
    except ValueError:
        if required:
            raise
        return None


def _first_touch(scope: TaskScope, session: Any) -> StateWriter | None:
    """
    The running try of the task instance Airflow's accessors act for (``None``: no such task
    instance), once that try has made its first touch of state: what a clear left for it to
    discard is gone (docs/clearing.md), as our handshake makes it go before our API serves the try.
    Airflow's accessors may come first, or alone, and must not find what ours would not.
    """
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_task_state.airflow_db.first_touch import discard_what_a_clear_left

    query = select(TI.id, TI.try_number).where(
        TI.dag_id == scope.dag_id,
        TI.run_id == scope.run_id,
        TI.task_id == scope.task_id,
        TI.map_index == scope.map_index,
    )
    # Airflow's session when it passes one: on SQLite another connection would wait for its lock.
    with create_session() if session is None else nullcontext(session) as db:
        row = db.execute(query).one_or_none()
        if row is None:
            return None
        discard_what_a_clear_left(str(row.id), session=db)
    return StateWriter.task_try(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, row.try_number)


class StateStoreBackend(MetastoreBackend):
    """Airflow 3.3's state store calls, answered by the backend of ``[state] backend``."""

    def get(self, scope: Any, key: str, *, session: Any = None) -> str | None:
        ours = _ours(scope, session)
        if isinstance(ours, TaskScope):
            _first_touch(ours, session)
        return None if ours is None else get_state_backend().get(ours, key, session=session)

    def set(
        self, scope: Any, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        ours = _ours(scope, session, required=True)
        assert ours is not None  # required
        writer = _first_touch(ours, session) if isinstance(ours, TaskScope) else None
        if expires_at is not None and expires_at.tzinfo is None:
            expires_at = expires_at.replace(tzinfo=UTC)  # Airflow keeps UTC
        get_state_backend().write(ours, key, value, writer=writer, expires_at=expires_at, session=session)

    def set_asset_state_store(
        self,
        scope: Any,
        key: str,
        value: str,
        *,
        kind: Any,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: int | None = None,
        session: Any = None,
    ) -> None:
        """An asset's key written by a task (its writer recorded) or by an event watcher (none)."""
        ours = _ours(scope, session, required=True)
        assert ours is not None
        writer = None
        if dag_id is not None and run_id is not None and task_id is not None and map_index is not None:
            writer = _first_touch(TaskScope(dag_id, run_id, task_id, map_index), session)
        get_state_backend().write(ours, key, value, writer=writer, session=session)

    def delete(self, scope: Any, key: str, *, session: Any = None) -> None:
        if (ours := _ours(scope, session)) is not None:
            if isinstance(ours, TaskScope):
                _first_touch(ours, session)
            get_state_backend().delete(ours, key, session=session)

    def clear(self, scope: Any, *, all_map_indices: bool = False, session: Any = None) -> None:
        if (ours := _ours(scope, session)) is not None:
            get_state_backend().clear(ours, all_map_indices=all_map_indices, session=session)

    # Airflow's async callers pass async sessions, which our backends do not take: each call runs
    # in a worker thread, in a transaction of its own.

    async def aget(self, scope: Any, key: str, *, session: Any = None) -> str | None:
        return await asyncio.to_thread(self.get, scope, key)

    async def aset(
        self, scope: Any, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        await asyncio.to_thread(self.set, scope, key, value, expires_at=expires_at)

    async def aset_asset_state_store(self, scope: Any, key: str, value: str, **writer: Any) -> None:
        writer.pop("session", None)
        await asyncio.to_thread(self.set_asset_state_store, scope, key, value, **writer)

    async def adelete(self, scope: Any, key: str, *, session: Any = None) -> None:
        await asyncio.to_thread(self.delete, scope, key)

    async def aclear(self, scope: Any, *, all_map_indices: bool = False, session: Any = None) -> None:
        await asyncio.to_thread(self.clear, scope, all_map_indices=all_map_indices)

    def cleanup(self) -> None:
        """``airflow state-store clean``: our backend's clean-up of expired keys."""
        get_state_backend().cleanup(now=datetime.now(UTC))
