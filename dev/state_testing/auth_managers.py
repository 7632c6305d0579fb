"""
An auth manager that grants some users access to named DAGs only, for tests of per-DAG authorization.

SimpleAuthManager's roles apply to every DAG at once; real deployments (FAB, Keycloak) grant per DAG.
This subclass keeps SimpleAuthManager's login and roles, and for the users in :data:`DAG_GRANTS`
allows reading and editing exactly the DAGs listed, and nothing on any other DAG. Configure it with
``[core] auth_manager = state_testing.auth_managers.PerDagAuthManager`` (``dev/`` on ``PYTHONPATH``).
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

#: User name -> the DAG ids that user may read and edit (every other DAG: nothing).
DAG_GRANTS: dict[str, frozenset[str]] = {"alice": frozenset({"operator_alpha"})}


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        grants = DAG_GRANTS.get(user.get_name())
        if grants is None:
            return super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )
        return details is not None and details.id in grants
