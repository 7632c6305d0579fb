from __future__ import annotations

from datetime import datetime

from airflow._shared.timezones import timezone
from airflow.models.asset import AssetModel
from airflow.state.metastore.models.base import Base
from airflow.state.metastore.models.types import StateKey, StateValue
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import ForeignKey, Integer
from sqlalchemy.orm import Mapped, mapped_column


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
