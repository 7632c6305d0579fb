"""
Credentials as a deployment's API server issues them, for tests that call the state API directly
(the way a task process does after its handshake), without running a task.

The test process holds what the API server holds, ``[api_auth] jwt_secret``, and derives the same
key from it; workers never can (they hold nothing to derive it from).
"""

from __future__ import annotations

from typing import Any

from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential
from airflow_task_state.api.signing_keys import derive


def api_server_key(env: dict[str, str]) -> bytes:
    """The key an API server with the environment *env* signs credentials with."""
    return derive(env["AIRFLOW__API_AUTH__JWT_SECRET"].encode())


def credential_for(env: dict[str, str], ti_row: dict[str, Any]) -> str:
    """A credential for the task instance of a ``task_instance`` row, signed as the API server would."""
    claims = TaskInstanceClaims(
        str(ti_row["id"]),
        ti_row["dag_id"],
        ti_row["run_id"],
        ti_row["task_id"],
        ti_row["map_index"],
        ti_row["try_number"],
    )
    return issue_credential(claims, api_server_key(env))
