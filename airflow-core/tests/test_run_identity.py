"""dag_run_uid names one incarnation of a dag run; task_scope() builds complete scopes from the database."""

from __future__ import annotations

import calendar
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from airflow_shared.state import TaskScope
from airflow_task_state.airflow_db.run_identity import dag_run_uid, task_scope


def micros(instant: datetime) -> int:
    """Microseconds since the epoch, computed without the code under test."""
    return calendar.timegm(instant.utctimetuple()) * 1_000_000 + instant.microsecond


@pytest.fixture
def runs(unique) -> Iterator[Callable[..., int]]:
    """``create(run_id="run") -> dag_run.id`` for a dag of this test; every such row removed afterwards."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import delete, select

    dag_id = f"identity_{unique}"

    def create(run_id: str = "run") -> int:
        with create_session() as session:
            session.add(
                DagRun(dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
            )
        with create_session() as session:
            return session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))

    create.dag_id = dag_id  # type: ignore[attr-defined]
    yield create
    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id))


def delete_run(dag_id: str, run_id: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def update_run(dag_run_id: int, **values) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(DagRun).where(DagRun.id == dag_run_id).values(**values))


# --- dag_run_uid ---------------------------------------------------------------------------


def test_uid_is_the_id_and_the_creation_instant_in_microseconds():
    created = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
    run_after = datetime(2020, 1, 1, tzinfo=UTC)
    assert dag_run_uid(42, created, run_after) == f"42.{micros(created)}"
    assert dag_run_uid(42, created, run_after) == "42.1796040000123456"


def test_uid_is_deterministic_and_tells_apart_ids_and_instants():
    created = datetime(2026, 11, 30, 12, 0, 0, 5, tzinfo=UTC)
    run_after = datetime(2026, 11, 30, tzinfo=UTC)
    assert dag_run_uid(7, created, run_after) == dag_run_uid(7, created, run_after)
    assert dag_run_uid(7, created, run_after) != dag_run_uid(8, created, run_after)
    # One microsecond apart, far from the epoch, where a float timestamp would round them together.
    later = created + timedelta(microseconds=1)
    assert dag_run_uid(7, created, run_after) != dag_run_uid(7, later, run_after)
    far = datetime(9999, 12, 31, 23, 59, 59, 999998, tzinfo=UTC)
    assert dag_run_uid(7, far, run_after) != dag_run_uid(7, far + timedelta(microseconds=1), run_after)


def test_naive_instants_are_utc_and_other_zones_are_converted():
    aware = datetime(2026, 11, 30, 12, 0, 0, 250000, tzinfo=UTC)
    naive = aware.replace(tzinfo=None)
    in_paris = aware.astimezone(timezone(timedelta(hours=1)))
    run_after = datetime(2020, 1, 1, tzinfo=UTC)
    expected = dag_run_uid(3, aware, run_after)
    assert dag_run_uid(3, naive, run_after) == expected
    assert dag_run_uid(3, in_paris, run_after) == expected
    # run_after takes part only when created_at is missing, and is read the same way.
    assert dag_run_uid(3, None, naive) == expected


def test_created_at_wins_and_run_after_is_the_fallback():
    created = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    run_after = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    assert dag_run_uid(9, created, run_after) == f"9.{micros(created)}"
    assert dag_run_uid(9, None, run_after) == f"9.{micros(run_after)}"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("7", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)), "dag_run_id"),
        ((True, datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)), "dag_run_id"),
        ((7, "2026-01-01 00:00:00", datetime(2026, 1, 1, tzinfo=UTC)), "created_at or run_after"),
        ((7, None, None), "created_at or run_after"),
    ],
    ids=["str-id", "bool-id", "str-created-at", "nothing"],
)
def test_wrong_types_are_refused(args, match):
    with pytest.raises(TypeError, match=match):
        dag_run_uid(*args)


# --- task_scope(), on the real database ------------------------------------------------------


def test_task_scope_fills_the_runs_uid(runs):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    dag_run_id = runs("run")
    scope = task_scope(runs.dag_id, "run", "submit", 3)

    with create_session() as session:
        row = session.get(DagRun, dag_run_id)
        expected = f"{dag_run_id}.{micros(row.created_at)}"
    assert scope == TaskScope(runs.dag_id, "run", "submit", 3, dag_run_uid=expected)
    # Asked again, the same run gives the same uid (backends key on it).
    assert task_scope(runs.dag_id, "run", "other_task").dag_run_uid == expected


def test_uid_differs_after_the_run_is_deleted_and_created_again(runs, db_kind):
    runs("older")  # another run of the dag, so the recreated one is not alone
    first_id = runs("run")  # the newest row: the highest id in the table
    first = task_scope(runs.dag_id, "run", "task")

    delete_run(runs.dag_id, "run")
    second_id = runs("run")
    second = task_scope(runs.dag_id, "run", "task")

    if db_kind == "sqlite":
        # Without AUTOINCREMENT, SQLite gives the deleted highest row's id to the next insert:
        # the reason the uid carries the creation instant too.
        assert second_id == first_id
    assert second.dag_run_uid != first.dag_run_uid
    assert (second.dag_id, second.run_id, second.task_id) == (first.dag_id, first.run_id, first.task_id)


def test_null_created_at_falls_back_to_run_after(runs):
    dag_run_id = runs("migrated")
    run_after = datetime(2026, 11, 30, 12, 0, 0, 654321, tzinfo=UTC)
    # As on a row migrated from an Airflow version that did not fill created_at.
    update_run(dag_run_id, created_at=None, run_after=run_after)

    scope = task_scope(runs.dag_id, "migrated", "task")

    assert scope.dag_run_uid == f"{dag_run_id}.{micros(run_after)}"


def test_task_scope_for_a_missing_run_says_which(runs):
    runs("exists")
    with pytest.raises(ValueError, match=rf"No DagRun found for dag_id='{runs.dag_id}', run_id='absent'"):
        task_scope(runs.dag_id, "absent", "task")
    with pytest.raises(ValueError, match="No DagRun found for dag_id='no_such_dag', run_id='exists'"):
        task_scope("no_such_dag", "exists", "task")


def test_task_scope_reads_through_the_callers_session(runs):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    with create_session() as session:
        run = DagRun(
            dag_id=runs.dag_id, run_id="uncommitted", run_type=DagRunType.MANUAL, state=DagRunState.RUNNING
        )
        session.add(run)
        session.flush()
        # Only this session can see the row: found through it, it proves the session is used.
        scope = task_scope(runs.dag_id, "uncommitted", "task", session=session)
        assert scope.dag_run_uid == dag_run_uid(run.id, run.created_at, run.run_after)
        session.rollback()


def test_task_scope_is_exported_and_importing_it_leaves_the_orm_models_alone():
    code = (
        "import sys, airflow_task_state\n"
        "from airflow_task_state import task_scope\n"
        "from airflow_task_state.airflow_db.run_identity import task_scope as direct\n"
        "assert task_scope is direct\n"
        "assert 'task_scope' in airflow_task_state.__all__\n"
        "assert 'airflow.models.dagrun' not in sys.modules, 'task_scope imported the ORM models'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
