"""
What Airflow's ProvidersManager learns about this distribution: the ``[state]`` options (written
down in :mod:`airflow.state.state_options`), the DB manager and the CLI.

Imported while ``airflow.configuration`` is still initialising (provider discovery runs inside it):
it imports nothing from Airflow, and the storage's reset hook only when Airflow asks for the info.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.state.state_options import STATE_OPTIONS


def get_provider_info() -> dict[str, Any]:
    # alembic 1.20 logs seven "setup plugin ..." lines at INFO when Airflow's models first import it,
    # and Airflow 3.2 logs INFO to stdout: they came before the document of every `-o json`. Airflow
    # asks for this info before it configures logging, which keeps the level of a logger it does not
    # name; a logging config that names the logger still decides.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    # The earliest code of ours that runs in every `airflow` command: the place to say that Airflow
    # 3.3 was installed over this distribution (see overinstall).
    from airflow.state.overinstall import warn_if_airflow_installed_over_us

    warn_if_airflow_installed_over_us()
    # Core's `airflow db reset` drops dag_run before asking our DB manager to drop task_state, which
    # PostgreSQL and MySQL refuse while our foreign keys point at it. A process may reset the
    # database without ever importing our models, so the hook is installed when Airflow asks for
    # this provider's info, which it does before any of its commands runs.
    from airflow.state.metastore import reset_hook

    reset_hook.install()
    return {
        "package-name": "airflow-task-state",
        "name": "Task State",
        "description": "Durable task and asset state for Apache Airflow (AIP-103).",
        "config": {
            "state": {"description": "Durable task and asset state (AIP-103).\n", "options": STATE_OPTIONS}
        },
        "db-managers": ["airflow.state.metastore.db_manager.StateDBManager"],
        "cli": ["airflow.state.cli.definition.get_state_cli_commands"],
    }
