from __future__ import annotations

from datetime import datetime

from airflow._shared.timezones import timezone
from airflow.models.asset import AssetModel
from airflow.models.base import StringID
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from airflow_task_state.metastore.models.base import Base
from airflow_task_state.metastore.models.types import StateKey, StateValue


class AssetStateModel(Base):
    """One key of an asset's state: independent of runs, deleted with the asset (ON DELETE CASCADE)."""

    __tablename__ = "asset_state"

    asset_id: Mapped[int] = mapped_column(
        Integer, ForeignKey(AssetModel.__table__.c.id, ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(StateKey(), primary_key=True)
    value: Mapped[str] = mapped_column(StateValue, nullable=False)
    # Filled on insert and on update through the ORM; the backend's statements set it themselves.
    updated_at: Mapped[datetime] = mapped_column(
        UtcDateTime, default=timezone.utcnow, onupdate=timezone.utcnow, nullable=False
    )
    # 1 when the key was created, one more on every write: what conditional writes compare.
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    # When the key expires (NULL: never). Reads skip expired keys; `airflow state clean` removes them.
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    # The last writer (a StateWriter): "task", "api" or "cli", and for a task the task instance
    # and its try. All NULL when the writer is not known.
    updated_by: Mapped[str | None] = mapped_column(String(16), nullable=True)
    updated_by_dag_id: Mapped[str | None] = mapped_column(StringID(), nullable=True)
    updated_by_run_id: Mapped[str | None] = mapped_column(StringID(), nullable=True)
    updated_by_task_id: Mapped[str | None] = mapped_column(StringID(), nullable=True)
    updated_by_map_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_by_try: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (Index("idx_asset_state_expires_at", "expires_at"),)
