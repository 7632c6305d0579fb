"""Drop the state tables before core drops the tables they reference."""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, event

# The tables our foreign keys point at.
_REFERENCED_TABLES = frozenset({"dag_run", "asset"})


def _drop_state_tables_first(target: MetaData, connection: Any, **kw: Any) -> None:
    dropping = {table.name for table in kw.get("tables") or target.tables.values()}
    if not dropping & _REFERENCED_TABLES:
        return
    from airflow_task_state.metastore import state_tables
    from airflow_task_state.metastore.models import metadata as airflow32_tables

    # On Airflow 3.3, 3.2's tables too: keys the upgrade could not move stay in them.
    for ours in (state_tables(), airflow32_tables):
        if target is not ours:
            ours.drop_all(connection, checkfirst=True)


def install() -> None:
    """Listen on every MetaData's ``before_drop``, once (no Airflow import: safe at any point of start-up)."""
    if not event.contains(MetaData, "before_drop", _drop_state_tables_first):
        event.listen(MetaData, "before_drop", _drop_state_tables_first)
