"""MetastoreStateBackend passes the shared conformance kit on the database of the run."""

from __future__ import annotations

import pytest
from airflow_shared.state import AssetScope, TaskScope
from airflow_shared.state.testing import StateBackendConformance


class TestMetastoreConformance(StateBackendConformance):
    @pytest.fixture
    def backend(self):
        from airflow.state.metastore import MetastoreStateBackend

        return MetastoreStateBackend()

    @pytest.fixture
    def make_task_scope(self, make_dag_run, unique):
        dag_id = f"conformance_{unique}"

        def make(run_id: str = "run_1", task_id: str = "task_1", map_index: int = -1) -> TaskScope:
            make_dag_run(dag_id, run_id)
            return TaskScope(dag_id, run_id, task_id, map_index)

        return make

    @pytest.fixture
    def make_asset_scope(self, make_asset):
        return lambda n: AssetScope(make_asset(n))
