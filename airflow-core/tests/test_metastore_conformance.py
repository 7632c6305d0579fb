"""MetastoreStateBackend passes the shared conformance kit on the database of the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from airflow_shared.state import AssetScope, TaskScope
from airflow_shared.state.testing import StateBackendConformance


class TestMetastoreConformance(StateBackendConformance):
    # task_state rows reference dag_run ON DELETE CASCADE: a deleted run takes its state along,
    # so the metastore may ignore dag_run_uid (and does).
    task_state_cascades_with_dag_run = True
    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self):
        from airflow_task_state.metastore import MetastoreStateBackend

        return MetastoreStateBackend()

    @pytest.fixture
    def refused_keys(self, db_kind) -> frozenset[str]:
        from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

        if AIRFLOW_HAS_STATE_STORE and db_kind == "mysql":  # Airflow 3.3's utf8mb3 key column
            return frozenset({"a ", "\U0001f600"})
        return frozenset()

    @pytest.fixture
    def make_task_scope(self, make_dag_run, unique):
        from airflow_task_state.airflow_db.run_identity import task_scope

        dag_id = f"conformance_{unique}"

        def make(run_id: str = "run_1", task_id: str = "task_1", map_index: int = -1) -> TaskScope:
            make_dag_run(dag_id, run_id)
            # The scope the state API would build: with the run's real dag_run_uid.
            return task_scope(dag_id, run_id, task_id, map_index)

        return make

    @pytest.fixture
    def recreate_dag_run(self, make_dag_run) -> Iterator:
        """Really delete the dag_run row (its task_state goes by cascade) and insert it again."""
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState
        from airflow.utils.types import DagRunType
        from airflow_task_state.airflow_db.run_identity import task_scope
        from sqlalchemy import delete

        recreated: set[tuple[str, str]] = set()

        def recreate(scope: TaskScope) -> TaskScope:
            where = (DagRun.dag_id == scope.dag_id, DagRun.run_id == scope.run_id)
            with create_session() as session:
                assert session.execute(delete(DagRun).where(*where)).rowcount == 1
            with create_session() as session:
                session.add(
                    DagRun(
                        dag_id=scope.dag_id,
                        run_id=scope.run_id,
                        run_type=DagRunType.MANUAL,
                        state=DagRunState.RUNNING,
                    )
                )
            recreated.add((scope.dag_id, scope.run_id))
            new = task_scope(scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
            assert new.dag_run_uid != scope.dag_run_uid
            return new

        yield recreate
        # make_dag_run removes the rows it created by id; the new rows may have other ids.
        with create_session() as session:
            for dag_id, run_id in recreated:
                session.execute(delete(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))

    @pytest.fixture
    def make_asset_scope(self, make_asset):
        return lambda n: AssetScope(make_asset(n))
