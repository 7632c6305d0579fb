"""
What Airflow's ProvidersManager learns about this distribution: the ``[state]`` options (written
down in :mod:`airflow_task_state.state_options`), the DB manager and the CLI.

Imported while ``airflow.configuration`` is still initialising (provider discovery runs inside it):
it imports nothing from Airflow, and the storage's reset hook only when Airflow asks for the info.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_task_state.state_options import STATE_OPTIONS


def get_provider_info() -> dict[str, Any]:
    # alembic 1.20 logs seven "setup plugin ..." lines at INFO when Airflow's models first import it,
    # and Airflow 3.2 logs INFO to stdout: they came before the document of every `-o json`. Airflow
    # asks for this info before it configures logging, which keeps the level of a logger it does not
    # name; a logging config that names the logger still decides.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    # Core's `airflow db reset` drops dag_run before asking our DB manager to drop task_state, which
    # PostgreSQL and MySQL refuse while our foreign keys point at it. A process may reset the
    # database without ever importing our models, so the hook is installed when Airflow asks for
    # this provider's info, which it does before any of its commands runs.
    from airflow_task_state.metastore import reset_hook

    reset_hook.install()
    return {
        "package-name": "airflow-task-state",
        "name": "Task State",
        "description": "Durable task and asset state for Apache Airflow (AIP-103).",
        "config": {
            "state": {"description": "Durable task and asset state (AIP-103).\n", "options": STATE_OPTIONS}
        },
        "db-managers": ["airflow_task_state.metastore.db_manager.StateDBManager"],
        "cli": ["airflow_task_state.cli.definition.get_state_cli_commands"],
    }
