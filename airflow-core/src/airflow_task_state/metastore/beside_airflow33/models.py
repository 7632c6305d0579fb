"""
What Airflow 3.3's state-store rows lack, one row per key beside them, on a MetaData of its own.

A meta row names its key as the Airflow row does (dag run, task, map index and key; asset and key),
with the same key column, so the two join one to one. It hangs on the dag run (or the asset) as the
Airflow row does, not on the Airflow row: never altering Airflow's tables, and surviving a delete of
the key by Airflow's own surfaces (which know nothing of it). ``updated_at`` is the Airflow row's
``updated_at`` that the last write of ours gave it: a row whose time differs was written since by
someone else, and the meta row then describes an earlier value.
"""

from __future__ import annotations

from datetime import datetime

from airflow.models.asset import AssetModel
from airflow.models.base import COLLATION_ARGS, StringID, naming_convention
from airflow.models.base import metadata as airflow_metadata
from airflow.models.dagrun import DagRun
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import ForeignKey, Index, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

metadata = MetaData(schema=airflow_metadata.schema, naming_convention=naming_convention)


class Base(DeclarativeBase):
    metadata = metadata


def _key() -> Mapped[str]:
    # Airflow 3.3's key column: utf8mb3 on MySQL, compared as Airflow compares it.
    return mapped_column(String(512, **COLLATION_ARGS), primary_key=True)


class TaskStateMetaModel(Base):
    """The version of a ``task_state_store`` key, and the try that wrote it."""

    __tablename__ = "task_state_meta"

    dag_run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey(DagRun.__table__.c.id, ondelete="CASCADE"), primary_key=True
    )
    task_id: Mapped[str] = mapped_column(StringID(), primary_key=True)
    map_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = _key()
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    updated_by_try: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


class AssetStateMetaModel(Base):
    """The version of an ``asset_state_store`` key, its expiry, and the kind and try of its writer."""

    __tablename__ = "asset_state_meta"

    asset_id: Mapped[int] = mapped_column(
        Integer, ForeignKey(AssetModel.__table__.c.id, ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = _key()
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    # "task", "api" or "cli" (Airflow's row says "api" for "cli": its API refuses kinds it lacks).
    updated_by: Mapped[str | None] = mapped_column(String(16), nullable=True)
    updated_by_try: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)

    __table_args__ = (Index("idx_asset_state_meta_expires_at", "expires_at"),)
