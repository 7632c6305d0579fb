"""
The Redis backend as Airflow 3.3's ``[state_store] backend``
(``airflow_state_redis.airflow33.RedisStoreBackend``), on the keys :class:`RedisStateBackend` wrote
on Airflow 3.2, so no data moves (docs/redis.md, "Upgrading to Airflow 3.3"). Imports only where
Airflow 3.3 is installed.

3.3's ``TaskScope`` does not say which incarnation of the dag run it means; our keys do, so each
call looks the run up (with the session 3.3 passes, or one of its own) and computes
:func:`airflow_shared.state.dag_run_uid` as the 3.2 servers did. Nothing is cached between calls:
a run deleted and created again with the same run_id starts empty, as on 3.2.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from airflow_shared.state import AssetScope, StateScope, TaskScope, dag_run_uid

from .backend import RedisStateBackend

try:
    # mypy checks this package in Airflow 3.2's environment, which has no airflow._shared.state
    # (3.2's airflow._shared has no py.typed either): there the module is untyped, hence the ignore.
    import airflow._shared.state as airflow33_state  # type: ignore[import-untyped,import-not-found,unused-ignore]
except ImportError as error:
    raise ImportError(
        "airflow_state_redis.airflow33.RedisStoreBackend is a backend for Airflow 3.3's "
        "[state_store] backend and needs Airflow 3.3 (airflow._shared.state cannot be imported: "
        f"{error}). On Airflow 3.2 use [state] backend = airflow_state_redis.RedisStateBackend."
    ) from error
# After the check above, so that Airflow 3.2 gets its message (3.3 imports the backend on first use).
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session, create_session_async
from sqlalchemy import select

__all__ = ["RedisStoreBackend"]

log = logging.getLogger(__name__)


def _dag_run_query(scope: Any) -> Any:
    return select(DagRun.id, DagRun.created_at, DagRun.run_after).where(
        DagRun.dag_id == scope.dag_id, DagRun.run_id == scope.run_id
    )


def _utc(expires_at: datetime | None) -> datetime | None:
    # Airflow keeps UTC; a naive expiry from a client means UTC, and ours insists on an aware one.
    if expires_at is not None and isinstance(expires_at, datetime) and expires_at.tzinfo is None:
        return expires_at.replace(tzinfo=UTC)
    return expires_at


def _asset_scope(scope: Any) -> AssetScope | None:
    """Ours for 3.3's asset scope; ``None`` for a task scope (its dag run must be looked up)."""
    if isinstance(scope, airflow33_state.TaskScope):
        return None
    if not isinstance(scope, airflow33_state.AssetScope):
        raise TypeError(f"scope must be Airflow 3.3's TaskScope or AssetScope, got {type(scope).__name__}")
    if scope.asset_id is None:
        raise ValueError(
            "RedisStoreBackend keys asset state on the asset's id, and this AssetScope has only "
            f"name={scope.name!r} / uri={scope.uri!r}. Airflow 3.3's servers pass asset_id; a "
            "worker-side backend ([workers] state_store_backend) receives name/uri and cannot be "
            "this class."
        )
    return AssetScope(scope.asset_id)


def _task_scope(scope: Any, row: Any, required: bool) -> TaskScope | None:
    """Ours for 3.3's task scope, given its dag run's *row*; ``None`` when the run does not exist."""
    if row is not None:
        uid = dag_run_uid(row.id, row.created_at, row.run_after)
        return TaskScope(scope.dag_id, scope.run_id, scope.task_id, scope.map_index, dag_run_uid=uid)
    if required:
        raise ValueError(f"No DagRun found for dag_id={scope.dag_id!r} run_id={scope.run_id!r}")
    return None


class RedisStoreBackend(airflow33_state.BaseStoreBackend):
    """A dag run that does not exist reads as empty and refuses writes (``ValueError``), as in 3.3's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.redis = RedisStateBackend(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.redis!r})"

    def _scope(self, scope: Any, session: Any, required: bool = False) -> StateScope | None:
        """Our scope for 3.3's, or ``None`` for a task scope whose dag run does not exist."""
        if (asset := _asset_scope(scope)) is not None:
            return asset
        # The session 3.3 passed, or one of our own for the lookup.
        with nullcontext(session) if session is not None else create_session() as active:
            return _task_scope(scope, active.execute(_dag_run_query(scope)).one_or_none(), required)

    async def _ascope(self, scope: Any, session: Any, required: bool = False) -> StateScope | None:
        if (asset := _asset_scope(scope)) is not None:
            return asset
        async with nullcontext(session) if session is not None else create_session_async() as active:
            result = await active.execute(_dag_run_query(scope))
            return _task_scope(scope, result.one_or_none(), required)

    # --- sync ---------------------------------------------------------------------------

    def get(self, scope: Any, key: str, *, session: Any = None) -> str | None:
        ours = self._scope(scope, session)
        return None if ours is None else self.redis.get(ours, key)

    def set(
        self, scope: Any, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        ours = self._scope(scope, session, required=True)
        assert ours is not None
        # 3.3 does not say who writes (task try, watcher or API): the write records no writer.
        self.redis.write(ours, key, value, expires_at=_utc(expires_at))

    def delete(self, scope: Any, key: str, *, session: Any = None) -> None:
        if (ours := self._scope(scope, session)) is not None:
            self.redis.delete(ours, key)

    def clear(self, scope: Any, *, all_map_indices: bool = False, session: Any = None) -> None:
        if (ours := self._scope(scope, session)) is not None:
            self.redis.clear(ours, all_map_indices=all_map_indices)

    # --- async --------------------------------------------------------------------------

    async def aget(self, scope: Any, key: str, *, session: Any = None) -> str | None:
        ours = await self._ascope(scope, session)
        return None if ours is None else await self.redis.aget(ours, key)

    async def aset(
        self, scope: Any, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        ours = await self._ascope(scope, session, required=True)
        assert ours is not None
        await self.redis.awrite(ours, key, value, expires_at=_utc(expires_at))

    async def adelete(self, scope: Any, key: str, *, session: Any = None) -> None:
        if (ours := await self._ascope(scope, session)) is not None:
            await self.redis.adelete(ours, key)

    async def aclear(self, scope: Any, *, all_map_indices: bool = False, session: Any = None) -> None:
        if (ours := await self._ascope(scope, session)) is not None:
            await self.redis.aclear(ours, all_map_indices=all_map_indices)

    # --- retention ----------------------------------------------------------------------

    def cleanup(self) -> None:
        """Remove expired keys: 3.3's ``airflow state-store clean`` skips backends other than its own."""
        removed = self.redis.cleanup(now=datetime.now(UTC))
        log.info("Removed %d expired state keys from Redis", removed)

    def close(self) -> None:
        self.redis.close()
