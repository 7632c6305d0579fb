"""
What Airflow's ProvidersManager learns about this distribution.

This module is imported while ``airflow.configuration`` is still initialising (provider discovery
runs inside it), so it may import nothing from Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow.state.metastore import reset_hook

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
        "api_secret": {
            "description": (
                "Secret that signs the short-lived tokens task processes send to the state API on the "
                "API server. Set the same long random value on every worker and API server. It is "
                "separate from ``[api_auth] jwt_secret``, which must stay on the scheduler and API server. "
                "Not needed under ``airflow dags test``."
            ),
            "version_added": "0.1.0",
            "type": "string",
            "sensitive": True,
            "example": None,
            "default": None,
        },
        "api_url": {
            "description": (
                "Base URL of the state API as workers reach it. Empty: the API server of "
                "``[core] execution_api_server_url`` with ``/state`` in place of ``/execution``."
            ),
            "version_added": "0.1.0",
            "type": "string",
            "example": "http://airflow-api-server:8080/state",
            "default": "",
        },
        "max_value_bytes": {
            "description": (
                "Largest value, as JSON text in UTF-8, that task code may store; checked in the task "
                "and again on the API server."
            ),
            "version_added": "0.1.0",
            "type": "integer",
            "example": None,
            "default": "65536",
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    # Core's `airflow db reset` drops dag_run before asking our DB manager to drop task_state, which
    # PostgreSQL and MySQL refuse while our foreign keys point at it. A process may reset the
    # database without ever importing our models, so the hook is installed when Airflow asks for
    # this provider's info, which it does before any of its commands runs.
    reset_hook.install()
    return {
        "package-name": "airflow-task-state",
        "name": "Task State",
        "description": "Durable task and asset state for Apache Airflow (AIP-103).",
        "config": {"state": _STATE_CONFIG},
        "db-managers": ["airflow.state.metastore.db_manager.StateDBManager"],
        "cli": ["airflow.state.cli.definition.get_state_cli_commands"],
    }
