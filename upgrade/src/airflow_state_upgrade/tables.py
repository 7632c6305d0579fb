"""
The tables on both sides of the move. Ours are reflected (airflow-task-state is not installed beside
Airflow 3.3) at the schema of 0.2.0 and later; Airflow 3.3's come from its own models, so values are
bound exactly as 3.3 binds them (its ``UtcDateTime`` among others).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from airflow.models.asset_state_store import AssetStateStoreModel
from airflow.models.task_state_store import TaskStateStoreModel
from sqlalchemy.engine import Engine

from .encoding import as_utc

OUR_TASK_TABLE = "task_state"
OUR_ASSET_TABLE = "asset_state"
OUR_VERSION_TABLE = "alembic_version_state"
# Written by this command when a move completes; dropped with our tables (see record_completed_move).
MARKER_TABLE = "airflow_state_upgrade"
# The schema this command reads: airflow-task-state 0.2.0's revision 0113 (0.3.0 has the same).
SUPPORTED_REVISION = "c4a8f2d60113"
# 0.1.0's revision 0112: no expiry, versions or asset writers yet.
OLDER_REVISIONS = {"b7d3e1a90112": "0.1.0"}
# The columns this command reads, which revision 0113 has.
REQUIRED_COLUMNS = {
    OUR_TASK_TABLE: {
        *("dag_run_id", "task_id", "map_index", "key", "dag_id", "run_id", "value", "updated_at"),
        "expires_at",
    },
    OUR_ASSET_TABLE: {
        *("asset_id", "key", "value", "updated_at", "expires_at", "updated_by", "updated_by_dag_id"),
        *("updated_by_run_id", "updated_by_task_id", "updated_by_map_index"),
    },
}


class CannotStart(Exception):
    """The move cannot begin; the message says why and what to do (exit status 2)."""


@dataclass(frozen=True)
class Tables:
    """Our tables that exist (``None``: not there, e.g. dropped already)."""

    task_state: sa.Table | None
    asset_state: sa.Table | None
    moved_at: datetime | None


def _reflect(engine: Engine, metadata: sa.MetaData, name: str) -> sa.Table | None:
    if not sa.inspect(engine).has_table(name):
        return None
    table = sa.Table(name, metadata, autoload_with=engine)
    if missing := REQUIRED_COLUMNS[name] - set(table.columns.keys()):
        raise CannotStart(
            f"Table {name} has no column(s) {', '.join(sorted(missing))}: it is not airflow-task-state's "
            "table, or its schema is damaged. Nothing was changed."
        )
    return table


def _check_our_revision(engine: Engine) -> None:
    """Refuse a schema of ours other than the one this command reads (no version table: nothing to check)."""
    if not sa.inspect(engine).has_table(OUR_VERSION_TABLE):
        return
    with engine.connect() as connection:
        revision = connection.execute(sa.text(f"SELECT version_num FROM {OUR_VERSION_TABLE}")).scalar()
    if revision in OLDER_REVISIONS:
        raise CannotStart(
            f"The airflow-task-state tables are at the schema of airflow-task-state "
            f"{OLDER_REVISIONS[revision]} (revision {revision}). On Airflow 3.2, upgrade "
            "airflow-task-state to 0.2 or later and run `airflow db migrate` there first (it keeps "
            "every row), then Airflow 3.3's `airflow db migrate` and this command. Nothing was changed."
        )
    if revision is not None and revision != SUPPORTED_REVISION:
        raise CannotStart(
            f"The airflow-task-state tables are at revision {revision}, which this command does not "
            f"know (it reads revision {SUPPORTED_REVISION}): install the airflow-task-state-upgrade "
            "release that matches the airflow-task-state you ran. Nothing was changed."
        )


def find_tables(engine: Engine) -> Tables:
    """Reflect ours; refuse to start when Airflow 3.3's tables are not there yet."""
    inspector = sa.inspect(engine)
    missing = [
        model.__tablename__
        for model in (TaskStateStoreModel, AssetStateStoreModel)
        if not inspector.has_table(model.__tablename__)
    ]
    if missing:
        raise CannotStart(
            f"Airflow 3.3's table(s) {', '.join(missing)} do not exist in this database yet. Run "
            "`airflow db migrate` with Airflow 3.3 first, then this command. Nothing was changed."
        )
    _check_our_revision(engine)
    metadata = sa.MetaData()
    return Tables(
        task_state=_reflect(engine, metadata, OUR_TASK_TABLE),
        asset_state=_reflect(engine, metadata, OUR_ASSET_TABLE),
        moved_at=_moved_at(engine),
    )


_MARKER = sa.Table(
    MARKER_TABLE, sa.MetaData(), sa.Column("moved_at", sa.DateTime(timezone=True), nullable=False)
)


def _moved_at(engine: Engine) -> datetime | None:
    if not sa.inspect(engine).has_table(MARKER_TABLE):
        return None
    with engine.connect() as connection:
        moved_at = connection.execute(sa.select(sa.func.min(_MARKER.c.moved_at))).scalar()
    return as_utc(moved_at)


def record_completed_move(engine: Engine, moved_at: datetime) -> None:
    """Remember that the move completed: a later run must not bring back what Airflow 3.3 deleted since."""
    with engine.begin() as connection:
        _MARKER.create(connection, checkfirst=True)
        if connection.execute(sa.select(sa.func.count()).select_from(_MARKER)).scalar() == 0:
            connection.execute(_MARKER.insert().values(moved_at=moved_at))


def drop_our_tables(engine: Engine) -> list[str]:
    """Drop our tables, our version table and the marker, in one transaction where the database allows it."""
    inspector = sa.inspect(engine)
    names = [
        name
        for name in (OUR_TASK_TABLE, OUR_ASSET_TABLE, OUR_VERSION_TABLE, MARKER_TABLE)
        if inspector.has_table(name)
    ]
    metadata = sa.MetaData()
    with engine.begin() as connection:
        for name in names:
            sa.Table(name, metadata).drop(connection)
    return names
