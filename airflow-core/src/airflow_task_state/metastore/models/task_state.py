from __future__ import annotations

from datetime import datetime

from airflow._shared.timezones import timezone
from airflow.models.base import StringID
from airflow.models.dagrun import DagRun
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import ForeignKey, Index, Integer, text
from sqlalchemy.orm import Mapped, mapped_column

from airflow_task_state.metastore.models.base import Base
from airflow_task_state.metastore.models.types import StateKey, StateValue


class TaskStateModel(Base):
    """
    One key of one task instance's state, shared by all its tries.

    ``dag_run_id`` is what the row hangs on: deleting the dag run deletes its state (ON DELETE
    CASCADE). ``dag_id`` and ``run_id`` are copied beside it so that reads by task instance
    identity need no join.
    """

    __tablename__ = "task_state"

    # The FK is given as a Column: the string "dag_run.id" cannot resolve across MetaData objects.
    dag_run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey(DagRun.__table__.c.id, ondelete="CASCADE"), primary_key=True
    )
    task_id: Mapped[str] = mapped_column(StringID(), primary_key=True)
    map_index: Mapped[int] = mapped_column(Integer, primary_key=True, server_default=text("-1"))
    key: Mapped[str] = mapped_column(StateKey(), primary_key=True)
    dag_id: Mapped[str] = mapped_column(StringID(), nullable=False)
    run_id: Mapped[str] = mapped_column(StringID(), nullable=False)
    value: Mapped[str] = mapped_column(StateValue, nullable=False)
    # Filled on insert and on update through the ORM; the backend's statements set it themselves.
    updated_at: Mapped[datetime] = mapped_column(
        UtcDateTime, default=timezone.utcnow, onupdate=timezone.utcnow, nullable=False
    )
    # Which try wrote the value; NULL when written from outside a task (CLI, API, tests).
    updated_by_try: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # 1 when the key was created, one more on every write: what conditional writes compare.
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    # When the key expires (NULL: never). Reads skip expired keys; `airflow state clean` removes them.
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)

    __table_args__ = (
        Index("idx_task_state_lookup", "dag_id", "run_id", "task_id", "map_index"),
        Index("idx_task_state_expires_at", "expires_at"),
    )
