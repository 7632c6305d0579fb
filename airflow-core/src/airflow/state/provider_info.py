"""
What Airflow's ProvidersManager learns about this distribution.

This module is imported while ``airflow.configuration`` is still initialising (provider discovery
runs inside it), so it may import nothing from Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow.state import reset_hook

# Core's `airflow db reset` drops dag_run before asking our DB manager to drop task_state, which
# PostgreSQL and MySQL refuse while our foreign keys point at it. This process may reset the
# database without ever importing our models, so the hook is installed as soon as Airflow
# discovers the provider.
reset_hook.install()

_STATE_CONFIG: dict[str, Any] = {
    "description": "Durable task and asset state (AIP-103).",
    "options": {
        "backend": {
            "description": (
                "Import path of the class that stores task and asset state. It must be a subclass "
                "of ``airflow_shared.state.BaseStateBackend``; the default keeps state in the "
                "Airflow metadata database (tables ``task_state`` and ``asset_state``)."
            ),
            "version_added": "0.1.0",
            "type": "string",
            "example": "my_company.state.RedisStateBackend",
            "default": "airflow.state.metastore.MetastoreStateBackend",
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-task-state",
        "name": "Task State",
        "description": "Durable task and asset state for Apache Airflow (AIP-103).",
        "config": {"state": _STATE_CONFIG},
        "db-managers": ["airflow.state.db_manager.StateDBManager"],
        "cli": ["airflow.state.cli.get_state_cli_commands"],
    }
