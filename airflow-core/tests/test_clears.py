# ruff: noqa: F811  (pytest fixtures imported from the suites they belong to)
"""
A clear after success starts afresh, a clear after failure keeps state, a retry always keeps it:
decided at a try's first touch of state (its handshake's proof exchange) from Airflow's own try
history. The task instances are real (an `airflow dags test` run); their tries are archived,
cleared and scheduled again by Airflow's own functions (``prepare_db_for_next_try``,
``clear_task_instances``, ``DagRun.schedule_tis``), as the execution API and the scheduler do.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from airflow_shared.state import TaskScope
from airflow_task_state import manage
from airflow_task_state.airflow_db.clears import ArchivedTry, discard_boundary, pending_try
from airflow_task_state.api.first_credential import claims_granted_for_proof
from airflow_task_state.cli.formats import count
from airflow_task_state.exceptions import StateConfigurationError
from airflow_task_state.keep_choice import KEEP_FIELD, KeepTaskState, parse_keep_choice
from airflow_task_state.metastore import MetastoreStateBackend
from airflow_task_state.protocol import PROOF_FIELD, proof
from sqlalchemy import select, text, update
from state_testing.airflow_cli import run_airflow
from test_operator_api import _airflow_token_secret, mint  # noqa: F401 (fixtures: one jwt_secret per run)
from test_state_api import TEST_DAGS, api, session_key

__all__ = ["api", "session_key"]  # fixtures, used by name

DAG_ID = "state_clear_cases"
TASKS = 42  # the plain tasks of the DAG (dags/state_clear_dags.py), t0 ... t41
VERIFIER = "c" * 43
backend = MetastoreStateBackend()


@pytest.fixture(scope="module")
def run_id() -> str:
    """
    One run of the DAG, created as the scheduler creates it (``create_dagrun``), every task
    instance's try 1 scheduled by ``DagRun.schedule_tis`` and then successful.
    """
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
        run_airflow("dags", "reserialize")
    run_id = f"clears_{uuid.uuid4().hex[:8]}"
    with create_session() as session:
        dag_run = create_run(run_id, session)
        dag = DBDagBag().get_latest_version_of_dag(DAG_ID, session=session)
        instances = dag_run.get_task_instances(session=session)
        for ti in instances:
            ti.task = dag.get_task(ti.task_id)
        assert dag_run.schedule_tis(instances, session=session) == len(instances) == TASKS + 4
    with create_session() as session:
        session.execute(update(TI).where(TI.dag_id == DAG_ID, TI.run_id == run_id).values(state="success"))
    return run_id


def create_run(run_id: str, session: Any) -> Any:
    """A run of the DAG, created as the scheduler creates it (``create_dagrun``); its dag run."""
    from airflow._shared.timezones import timezone
    from airflow.models.dagbag import DBDagBag
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dag = DBDagBag().get_latest_version_of_dag(DAG_ID, session=session)
    return dag.create_dagrun(
        run_id=run_id,
        run_after=timezone.utcnow(),
        run_type=DagRunType.MANUAL,
        triggered_by=DagRunTriggeredByType.TEST,
        state=DagRunState.RUNNING,
        session=session,
    )


_fresh = itertools.count()


@dataclass
class Instance:
    """One task instance of the run, driven through its tries as Airflow drives them."""

    run_id: str
    task_id: str
    map_index: int = -1

    def _ti(self, session):
        from airflow.models.taskinstance import TaskInstance as TI

        return session.scalar(
            select(TI).where(
                TI.dag_id == DAG_ID,
                TI.run_id == self.run_id,
                TI.task_id == self.task_id,
                TI.map_index == self.map_index,
            )
        )

    def _set(self, **values) -> None:
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.utils.session import create_session

        with create_session() as session:
            session.execute(update(TI).where(TI.id == self._ti(session).id).values(**values))

    @property
    def scope(self) -> TaskScope:
        return manage.find_task_scope(DAG_ID, self.run_id, self.task_id, self.map_index, _session())

    @property
    def try_number(self) -> int:
        from airflow.utils.session import create_session

        with create_session() as session:
            return self._ti(session).try_number

    @property
    def max_tries(self) -> int:
        from airflow.utils.session import create_session

        with create_session() as session:
            return self._ti(session).max_tries

    def write(self, key: str, *, by_operator: bool = False, value: str = "v") -> None:
        if not by_operator:
            self.records_its_choice()
        backend.set_by_try(self.scope, key, value, try_number=None if by_operator else self.try_number)

    def records_its_choice(self, keep: object = None) -> None:
        """
        What a try's handshake writes before its first state call: the task's choice among its
        rendered fields (``None``: it sets none), kept if a process of the try recorded one already.
        """
        from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = self._ti(session)
            fields = RTIF.get_templated_fields(ti, session=session) or {}
            if KEEP_FIELD not in fields:
                session.scalar(select(TI).where(TI.id == ti.id)).update_rtif(
                    {**fields, KEEP_FIELD: keep}, session=session
                )

    def keys(self) -> list[str]:
        return backend.keys(self.scope)

    def running(self) -> None:
        """The current try runs (still running: ti_run set it so)."""
        self._set(state="running")

    def ends(self, state: str) -> None:
        """The try ends in *state* (success, failed: no retries left), or is marked so by a user."""
        self._set(state=state)

    def fails_with_retry(self) -> None:
        """What the execution API does when a running try fails with retries left."""
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = self._ti(session)
            assert ti.state == "running"
            ti.prepare_db_for_next_try(session)
            ti.state = "up_for_retry"

    def cleared(self) -> None:
        """A clear, by whichever path: they all end in clear_task_instances."""
        from airflow.models.taskinstance import clear_task_instances
        from airflow.utils.session import create_session

        with create_session() as session:
            clear_task_instances([self._ti(session)], session)

    def scheduled(self) -> None:
        """The scheduler takes the next try (try_number goes up here)."""
        from airflow.models.dagbag import DBDagBag
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = self._ti(session)
            dag = DBDagBag().get_latest_version_of_dag(DAG_ID, session=session)
            ti.task = dag.get_task(self.task_id)
            assert ti.dag_run.schedule_tis([ti], session=session) == 1

    def next_try_starts(self, keep: object = None) -> None:
        """The next try is scheduled, runs, and its process first touches state (the proof exchange)."""
        self.scheduled()
        self.running()
        self.first_touch(keep)

    def first_touch(self, keep: object = None) -> None:
        """A process of the running try redeems its proof, the task's choice recorded beside it."""
        ti_id = self.proof_written(keep)
        claims = claims_granted_for_proof(ti_id, VERIFIER)
        assert claims.try_number == self.try_number

    def proof_written(self, keep: object = None) -> str:
        """What the running try's supervisor writes for its handshake; the try's task instance id."""
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = self._ti(session)
            ti_id = str(ti.id)
            fields = {PROOF_FIELD: proof(ti_id, VERIFIER), KEEP_FIELD: keep}
            session.scalar(select(TI).where(TI.id == UUID(ti_id))).update_rtif(fields, session=session)
        return ti_id

    def rendered_fields_stored_as(self, raw: str) -> bool:
        """
        The task instance's rendered fields replaced by *raw*, as only a direct write to the
        database can; ``False`` where the database refuses that text in a JSON column.
        """
        from airflow.utils.session import create_session
        from sqlalchemy.exc import DBAPIError

        try:
            with create_session() as session:
                session.execute(
                    text(
                        "UPDATE rendered_task_instance_fields SET rendered_fields = :raw WHERE dag_id = :d"
                        " AND run_id = :r AND task_id = :t AND map_index = :m"
                    ),
                    {"raw": raw, "d": DAG_ID, "r": self.run_id, "t": self.task_id, "m": self.map_index},
                )
        except DBAPIError:
            return False
        return True

    def history(self) -> list[tuple[int, str]]:
        from airflow.models.taskinstancehistory import TaskInstanceHistory as TIH
        from airflow.utils.session import create_session

        with create_session() as session:
            return [
                tuple(row)
                for row in session.execute(
                    select(TIH.try_number, TIH.state)
                    .where(TIH.dag_id == DAG_ID, TIH.run_id == self.run_id, TIH.task_id == self.task_id)
                    .where(TIH.map_index == self.map_index)
                    .order_by(TIH.try_number)
                )
            ]


def _session():
    from airflow.settings import Session

    return Session()


@pytest.fixture
def instance(run_id) -> Instance:
    """A task instance no other test touches, at try 1, successful."""
    n = next(_fresh)
    assert n < TASKS, "add tasks to state_clear_cases"
    return Instance(run_id, f"t{n}")


@pytest.fixture
def keep_by_default(monkeypatch):
    def configure(choice: str) -> None:
        monkeypatch.setenv("AIRFLOW__STATE__KEEP_TASK_STATE", choice)

    return configure


# --- the rule, try by try -------------------------------------------------------------------------


@pytest.mark.parametrize("default", ["after_failure", "never"])
def test_a_retry_keeps_state_whatever_the_choice(instance, keep_by_default, default):
    keep_by_default(default)
    instance.running()
    instance.write("job")
    instance.fails_with_retry()
    instance.next_try_starts()
    assert instance.try_number == 2 and instance.history() == [(1, "failed")]
    assert instance.keys() == ["job"]


def test_a_clear_after_success_starts_afresh_but_keeps_what_operators_wrote(instance):
    instance.write("job")  # by try 1, which succeeded
    instance.write("operator_note", by_operator=True)
    instance.cleared()
    assert instance.history() == [(1, "success")]
    instance.next_try_starts()
    assert instance.keys() == ["operator_note"]
    instance.write("new_job")  # by try 2
    # Each later process of the try (a deferral resume, a reschedule poke) decides again: nothing more goes.
    instance.first_touch()
    assert instance.keys() == ["new_job", "operator_note"]


def test_airflow_tasks_clear_archives_the_success_the_next_try_discards(run_id):
    instance = Instance(run_id, "by_cli")
    instance.write("job")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
        # Airflow 3.2 matches --task-regex as a substring of the task id.
        run_airflow("tasks", "clear", DAG_ID, "--task-regex", "by_cli", "--yes")
    assert instance.history() == [(1, "success")]
    instance.next_try_starts()
    assert instance.keys() == []


def test_a_clear_after_failure_keeps_state(instance):
    instance.running()
    instance.write("job")
    instance.ends("failed")  # no retries left: the job may still run
    instance.cleared()
    instance.next_try_starts()
    assert instance.history() == [(1, "failed")] and instance.keys() == ["job"]


def test_cleared_twice_before_the_new_try_ran_still_starts_afresh(instance):
    instance.write("job")
    instance.cleared()
    instance.scheduled()  # try 2 queued...
    instance.cleared()  # ...and cleared again before it ran: archived as a failed try 2
    instance.next_try_starts()
    assert instance.try_number == 3 and instance.history() == [(1, "success"), (2, "failed")]
    assert instance.keys() == []


def test_a_success_cleared_then_a_failure_cleared_keeps_the_failed_tries_state(instance):
    instance.write("old_job")
    instance.cleared()
    instance.next_try_starts()
    instance.write("job")  # by try 2, which fails with no retries left
    instance.ends("failed")
    instance.cleared()
    instance.next_try_starts()
    assert instance.keys() == ["job"]


def test_marked_success_then_cleared_starts_afresh_marked_failed_keeps(run_id):
    marked_success, marked_failed = (Instance(run_id, f"t{next(_fresh)}") for _ in range(2))
    for instance, marked in ((marked_success, "success"), (marked_failed, "failed")):
        instance.running()
        instance.write("job")
        instance.ends(marked)  # by a user, while it ran or after
        instance.cleared()
        instance.next_try_starts()
    assert marked_success.keys() == [] and marked_failed.keys() == ["job"]


def test_map_indexes_are_decided_each_on_its_own_tries(run_id):
    succeeded, failed = Instance(run_id, "mapped", 0), Instance(run_id, "mapped", 1)
    succeeded.write("job_of_index_0")
    failed.running()
    failed.write("job_of_index_1")
    failed.ends("failed")
    for instance in (succeeded, failed):
        instance.cleared()
        instance.next_try_starts()
    assert succeeded.keys() == [] and failed.keys() == ["job_of_index_1"]


@pytest.mark.parametrize(("chosen", "kept"), [({}, []), ({KEEP_FIELD: "always"}, ["job"])])
def test_under_dag_test_the_in_process_credential_discards_the_same(instance, chosen, kept):
    from airflow.utils.session import create_session
    from airflow_task_state.airflow_db.first_touch import discard_what_a_clear_left

    instance.write("job")
    instance.cleared()
    instance.scheduled()
    instance.running()
    with create_session() as session:
        ti_id = str(instance._ti(session).id)
    discard_what_a_clear_left(ti_id, chosen)  # what the plugin does before it grants the credential
    assert instance.keys() == kept


def test_redeeming_a_proof_decides_who_is_asking_and_removes_nothing(instance):
    """
    Authentication only says who is asking: the proof alone leaves what the clear left in place.
    The step that grants the try its first credential removes it, before the credential exists.
    """
    from airflow_task_state.api.proofs import claims_for_proof

    instance.write("job")  # by try 1, which succeeded
    instance.cleared()
    instance.scheduled()
    instance.running()
    ti_id = instance.proof_written()
    assert claims_for_proof(ti_id, VERIFIER)[0].try_number == 2
    assert instance.keys() == ["job"]
    claims_granted_for_proof(ti_id, VERIFIER)
    assert instance.keys() == []


def test_the_first_request_of_a_try_never_reads_what_its_clear_left(instance, api):
    """
    A task process's first request carries its proof (no handshake of its own), and is often the
    read of the job id it resumes from: after a clear of a success, that read finds nothing.
    """
    instance.write("job")  # by try 1, which succeeded
    instance.cleared()
    instance.scheduled()
    instance.running()
    ti_id = instance.proof_written()
    proving = {"Authorization": f"StateProof {ti_id}.{VERIFIER}"}
    first = api.get(f"/task-instances/{ti_id}/value", params={"key": "job"}, headers=proving)
    assert first.status_code == 404 and "X-Airflow-State-Credential" in first.headers, first.text
    assert instance.keys() == []


# --- the choices ----------------------------------------------------------------------------------


def test_never_discards_on_a_clear_after_failure_not_on_a_retry(instance, keep_by_default):
    keep_by_default("never")
    instance.running()
    instance.write("job")
    instance.ends("failed")
    instance.cleared()
    instance.next_try_starts()
    assert instance.keys() == []
    instance.write("job_of_try_2")
    instance.fails_with_retry()  # a retry after the clear: try 2's state is kept
    instance.next_try_starts()
    assert instance.try_number == 3 and instance.keys() == ["job_of_try_2"]


def test_never_discards_on_a_clear_of_a_skipped_try_that_left_max_tries_as_it_was(instance, keep_by_default):
    """
    A try that skipped itself (AirflowSkipException) after writing state, its retries unused,
    cleared once the task's retries were lowered by the one try it used: the clear sets max_tries
    to 1 + 1, what it was, as a retry keeps it. Airflow archived the try as skipped, which no retry
    does: a clear, and ``never`` discards.
    """
    keep_by_default("never")
    instance._set(max_tries=2)  # its run was created when the task had retries=2; the DAG has 1 now
    instance.running()
    instance.write("job")
    instance.ends("skipped")
    instance.cleared()
    instance.next_try_starts()
    assert instance.history() == [(1, "skipped")] and instance.max_tries == 2
    assert instance.keys() == []


def test_never_keeps_state_where_a_clear_cannot_be_told_from_a_retry(instance, keep_by_default):
    """
    A try marked failed while it still had retries left, cleared once the task's retries were
    lowered by the one try it used: Airflow archives it as failed and sets max_tries to what it was,
    both as a retry leaves them, and records nothing else of this clear on the task instance
    (docs/clearing.md, "What cannot be told apart"). Taken for a retry: kept, as a retry must be.
    """
    keep_by_default("never")
    instance._set(max_tries=2)  # as above: retries lowered from 2 to 1 since the run was created
    instance.running()
    instance.write("job")
    instance.ends("failed")
    instance.cleared()
    instance.next_try_starts()
    assert instance.history() == [(1, "failed")] and instance.max_tries == 2
    assert instance.keys() == ["job"]


def test_never_keeps_on_a_retry_while_another_task_of_the_run_is_cleared(run_id, keep_by_default):
    """
    A clear of any task of the run counts in the run's ``clear_number`` and ``queued_at``: they
    cannot say which task instance was cleared, so the rule does not read them, and a retry keeps.
    """
    keep_by_default("never")
    retried, cleared = (Instance(run_id, f"t{next(_fresh)}") for _ in range(2))
    retried.running()
    retried.write("job")
    retried.fails_with_retry()
    cleared.cleared()  # the run's clear_number goes up
    retried.next_try_starts()
    assert retried.history() == [(1, "failed")] and retried.keys() == ["job"]


def test_always_keeps_on_a_clear_after_success(instance, keep_by_default):
    keep_by_default("always")
    instance.write("job")
    instance.cleared()
    instance.next_try_starts()
    assert instance.keys() == ["job"]


@pytest.mark.parametrize(
    ("default", "task_choice", "kept"),
    [("never", "always", True), ("always", "after_failure", False), ("after_failure", "never", False)],
)
def test_the_tasks_choice_wins_over_the_deployments(instance, keep_by_default, default, task_choice, kept):
    keep_by_default(default)
    instance.write("job")
    instance.cleared()
    instance.next_try_starts(keep=task_choice)
    assert instance.keys() == (["job"] if kept else [])


@pytest.mark.parametrize("recorded", ["bogus", 7, ["always"], {"x": 1}])
def test_a_recorded_choice_that_is_no_choice_follows_the_default_and_breaks_nothing(
    instance, keep_by_default, caplog, recorded
):
    keep_by_default("always")
    instance.write("job")
    instance.cleared()
    with caplog.at_level(logging.WARNING):
        instance.next_try_starts(keep=recorded)  # the credential is still issued
    assert instance.keys() == ["job"]
    assert "keep_task_state" in caplog.text


def test_a_misconfigured_default_says_what_to_set(keep_by_default):
    from airflow_task_state import config

    keep_by_default("sometimes")
    with pytest.raises(StateConfigurationError, match=r"\[state\] keep_task_state is 'sometimes'.*'never'"):
        config.keep_task_state()
    for spelled, choice in (("True", "always"), ("false", "never"), (" NEVER ", "never"), ("", None)):
        keep_by_default(spelled)
        if choice is None:
            with pytest.raises(StateConfigurationError):
                config.keep_task_state()
        else:
            assert config.keep_task_state() == choice


def test_a_tasks_attribute_travels_as_a_rendered_field_and_a_bad_one_is_refused():
    from airflow.sdk.bases.operator import BaseOperator
    from airflow_task_state.worker.handshake import keep_choice_field

    class Resumable(BaseOperator):
        keep_task_state = "never"

    assert keep_choice_field(Resumable(task_id="a")) == {KEEP_FIELD: "never"}
    plain = BaseOperator(task_id="b")
    assert keep_choice_field(plain) == {KEEP_FIELD: None}  # recorded either way
    for chosen, recorded in ((True, "always"), (False, "never"), ("always", "always")):
        plain.keep_task_state = chosen
        assert keep_choice_field(plain) == {KEEP_FIELD: recorded}
    plain.keep_task_state = "sometimes"
    with pytest.raises(StateConfigurationError, match=r"b.keep_task_state is 'sometimes'"):
        keep_choice_field(plain)


# --- what operators see between the clear and the next try ---------------------------------------


def test_operators_do_not_see_what_the_next_try_will_discard(instance):
    from airflow.utils.session import create_session

    instance.write("job")
    instance.write("job_meta")
    instance.write("operator_note", by_operator=True)
    instance.cleared()
    scope = instance.scope
    assert backend.keys(scope) == ["job", "job_meta", "operator_note"]  # still stored...
    entries, total = manage.entries(scope)
    assert ([entry.key for entry in entries], total) == (["operator_note"], 1)  # ...but not live
    assert manage.entries(scope, key_prefix="job") == ([], 0)
    with pytest.raises(manage.NotFound):
        manage.entry(scope, "job")
    assert manage.entry(scope, "operator_note").value == "v"
    with create_session() as session:
        counts = {
            held.scope.task_id: held.key_count
            for held in manage.task_instances_with_state(DAG_ID, instance.run_id, session)
        }
    assert counts[instance.task_id] == 1
    instance.next_try_starts()
    instance.write("new_job")
    entries, total = manage.entries(scope, limit=1)
    assert ([entry.key for entry in entries], total) == (["new_job"], 2)


# --- what operators write between the clear and the next try: one rule with what they read ----------


def _cleared_with_a_counter(instance: Instance) -> TaskScope:
    """Try 1 (successful) counted to 42 and noted a job, an operator a note; then a clear."""
    instance.write("count", value="42")
    instance.write("job")
    instance.write("operator_note", by_operator=True)
    instance.cleared()
    with pytest.raises(manage.NotFound):  # what operators read: try 1's keys are gone
        manage.entry(instance.scope, "count")
    return instance.scope


@pytest.mark.parametrize(
    ("write", "count_after"),
    [
        (lambda scope: manage.increment(scope, "count").value, "1"),  # from nothing, not from 42
        (lambda scope: manage.put(scope, "count", "7", if_version=0).version, "7"),  # absent: created
        (lambda scope: manage.put(scope, "count", "7").version, "7"),
        (lambda scope: manage.delete(scope, "count"), None),
    ],
    ids=["increment", "put-if-absent", "put", "delete"],
)
def test_operator_writes_act_on_the_state_operators_read(instance, write, count_after):
    scope = _cleared_with_a_counter(instance)
    answered = write(scope)
    assert answered in (1, None)  # the new counter, the new key's first version; delete answers nothing
    # The discard the next try would make is made: try 1's keys are gone, the operator's stay.
    assert backend.get(scope, "job") is None
    assert backend.get(scope, "count") == count_after
    instance.next_try_starts()  # its own discard removes nothing more: the write survives
    assert {key: backend.get(scope, key) for key in backend.keys(scope)} == {
        **({} if count_after is None else {"count": count_after}),
        "operator_note": "v",
    }


@pytest.fixture
def operator_token(mint) -> dict[str, str]:
    """
    Headers of a SimpleAuthManager user who may write task state, minted as the operators' API tests
    mint theirs: Airflow keeps the first [api_auth] jwt_secret its token signer and validator see
    for the whole process, so every test module must use the same one.
    """
    return {"Authorization": f"Bearer {mint('user')}"}


def test_the_operators_api_writes_a_key_it_reported_absent(instance, operator_token):
    from airflow_task_state.api.app import create_app
    from fastapi.testclient import TestClient

    _cleared_with_a_counter(instance)
    url = f"/api/v1/dags/{DAG_ID}/dagRuns/{instance.run_id}/taskInstances/{instance.task_id}/stateEntry"
    with TestClient(create_app()) as api:
        assert api.get(url, params={"key": "count"}, headers=operator_token).status_code == 404
        created = api.put(
            url, params={"key": "count", "if_version": 0}, json={"value": 7}, headers=operator_token
        )
        assert created.status_code == 200, created.text  # not 409 over the key it reported absent
        assert created.json()["version"] == 1


def test_the_cli_increments_from_what_it_reads(instance, cli):
    _cleared_with_a_counter(instance)
    where = ("--dag-id", DAG_ID, "--run-id", instance.run_id, "--task-id", instance.task_id)
    assert cli("increment", "count", *where).strip() == "1"
    instance.next_try_starts()
    assert backend.get(instance.scope, "count") == "1"


def test_an_import_writes_keys_reported_absent_and_they_survive_the_next_try(instance, cli, tmp_path):
    _cleared_with_a_counter(instance)
    row = {"scope": "task", "dag_id": DAG_ID, "run_id": instance.run_id, "task_id": instance.task_id}
    rows = tmp_path / "state.jsonl"
    rows.write_text(json.dumps({**row, "map_index": -1, "key": "count", "value": 7}) + "\n")
    assert "Imported 1 key (1 new, 0 overwritten)" in cli("import", str(rows), "-a", "fail")
    assert backend.get(instance.scope, "job") is None
    instance.next_try_starts()
    assert backend.get(instance.scope, "count") == "7"


def test_clean_removes_what_clears_left_for_the_next_try_to_discard(instance, cli):
    """
    Before an upgrade to Airflow 3.3 (which would hand them to the next try as live keys),
    ``airflow state clean --cleared`` removes the keys a clear left for the next try to discard;
    that try's first touch then finds nothing more to remove, and what operators wrote stays.
    """
    instance.write("job")  # by try 1, which succeeded
    instance.write("operator_note", by_operator=True)
    instance.cleared()
    assert "clears left" not in cli("clean", "-y")  # only asked for with --cleared
    assert instance.keys() == ["job", "operator_note"]
    dry_run = cli("clean", "--cleared", "--dry-run")
    assert instance.keys() == ["job", "operator_note"]  # a dry run removes nothing
    left = int(dry_run.split("Would remove ")[1].split(" key")[0])  # this run's other tests leave some too
    assert left >= 1 and dry_run.endswith(
        f"Would remove {count(left, 'key')} that clears left for the next try to discard\n"
    )
    assert f"Removed {count(left, 'key')} that clears left" in cli("clean", "--cleared", "-y")
    assert instance.keys() == ["operator_note"]
    assert "Removed 0 keys that clears left" in cli("clean", "--cleared", "-y")  # nothing more anywhere
    instance.next_try_starts()
    instance.write("new_job")
    assert instance.keys() == ["new_job", "operator_note"]


# --- the rule itself, on histories Airflow can leave ------------------------------------------------


def archived(*tries: tuple[int, str, int]) -> list[ArchivedTry]:
    return [ArchivedTry(*row) for row in tries]


@pytest.mark.parametrize(
    ("choice", "current", "max_tries", "history", "boundary"),
    [
        # Nothing archived: a first try.
        ("after_failure", 1, 1, [], None),
        ("never", 1, 1, [], None),
        # Retries (max_tries kept): nothing goes, whatever the choice.
        ("never", 3, 2, [(1, "failed", 2), (2, "failed", 2)], None),
        # A success cleared, then a retry of the try after it: only the success's keys go.
        ("after_failure", 3, 3, [(1, "success", 1), (2, "failed", 3)], 1),
        ("never", 3, 3, [(1, "success", 1), (2, "failed", 3)], 1),
        # An executor failure while queued leaves no row for try 2: the success of try 1 still counts.
        ("after_failure", 3, 2, [(1, "success", 1)], 1),
        # A clear after failure: never discards up to it, after_failure keeps.
        ("never", 2, 1, [(1, "failed", 0)], 1),
        ("after_failure", 2, 1, [(1, "failed", 0)], None),
        # Archived in a state no retry archives: a clear, even where max_tries is as it was.
        ("never", 2, 2, [(1, "skipped", 2)], 1),
        ("never", 2, 2, [(1, "upstream_failed", 2)], 1),
        ("after_failure", 2, 2, [(1, "skipped", 2)], None),
        # Archived as failed, max_tries as it was: a retry, or a clear no record tells from one. Kept.
        ("never", 2, 2, [(1, "failed", 2)], None),
        # Rows of the current try or later (a try archived while its process still ran) do not count.
        ("after_failure", 2, 2, [(1, "failed", 2), (2, "success", 2)], None),
        ("always", 2, 2, [(1, "success", 1)], None),
    ],
)
def test_discard_boundary(choice, current, max_tries, history, boundary):
    assert discard_boundary(KeepTaskState(choice), current, max_tries, archived(*history)) == boundary


def test_the_pending_try_is_the_next_once_the_current_is_archived():
    assert pending_try(1, archived((1, "success", 1))) == 2
    assert pending_try(2, archived((1, "success", 1))) == 2


@pytest.mark.parametrize("value", [None, 1, "", "yes", ["never"]])
def test_parse_keep_choice_refuses_what_is_no_choice(value):
    with pytest.raises(ValueError, match="set it to one of 'after_failure', 'always', 'never'"):
        parse_keep_choice(value, "t.keep_task_state")


@pytest.mark.parametrize("stored", ["nested_too_deep", "choice_in_a_string"])
def test_rendered_fields_that_are_not_a_json_object_hide_nothing_from_operators_and_break_nothing(
    instance, stored, db_kind
):
    """
    The operators' views read the task's choice where its last try recorded it, among the rendered
    fields: fields that are no JSON object (only a direct write to the database leaves them) record
    no choice, so nothing is hidden, on every driver (psycopg2 decoded a JSON string holding the
    record's object as that object), and nothing fails (JSON nested deeper than Python decodes).
    """
    instance.write("job")  # by try 1, which succeeded: a clear's next try would discard it
    instance.cleared()
    raw = {
        "nested_too_deep": '{"a":' * 3000 + "1" + "}" * 3000,
        "choice_in_a_string": json.dumps(json.dumps({KEEP_FIELD: "never"})),
    }[stored]
    if not instance.rendered_fields_stored_as(raw):
        pytest.skip(f"{db_kind} refuses {stored} in a JSON column")
    try:
        entries, total = manage.entries(instance.scope)
        assert ([entry.key for entry in entries], total) == (["job"], 1)
    finally:  # Airflow's own writes of rendered fields read the row first, and would fail on it
        instance.rendered_fields_stored_as("{}")


# --- clean --cleared removes only what the task's recorded choice discards ------------------------


def test_clean_cleared_keeps_what_a_task_choosing_always_kept_after_its_rendered_fields_are_pruned(
    instance, cli
):
    """
    A task choosing ``keep_task_state = "always"`` (the deployment keeps the default,
    after_failure) was cleared after success; its next try kept try 1's key, as the task chose.
    Airflow then prunes that run's rendered fields (``[core] num_dag_runs_to_retain_rendered_fields``,
    30 by default: every daily DAG's runs older than a month), where the choice was recorded.
    ``airflow state clean --cleared`` must not remove the key the task kept: it is live state.
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    instance.write("job")  # by try 1, which succeeded
    instance.cleared()
    instance.next_try_starts(keep="always")
    assert instance.keys() == ["job"]  # kept, as the task chose
    assert [entry.key for entry in manage.entries(instance.scope)[0]] == ["job"]
    instance.ends("success")
    with create_session() as session:  # a later run of the DAG
        create_run(f"newer_{uuid.uuid4().hex[:8]}", session)
    with create_session() as session:  # what Airflow does at each later try's rendered-fields upload
        prune = RenderedTaskInstanceFields.delete_old_records
        prune(instance.task_id, DAG_ID, num_to_keep=1, session=session)
    cli("clean", "--cleared", "-y")
    assert instance.keys() == ["job"]


def test_clean_cleared_dry_run_counts_what_the_real_run_removes_with_older_than(instance, cli):
    """
    ``clean --cleared --older-than X --dry-run`` must announce what ``clean --cleared --older-than X``
    then removes: a key a clear left that is also older than X goes once, not twice.
    """
    import re
    import time

    from airflow._shared.timezones import timezone

    instance.write("job")  # by try 1, which succeeded
    instance.cleared()
    time.sleep(0.05)
    cutoff = timezone.utcnow().isoformat()

    def removed(out: str) -> list[int]:
        return [int(number) for number in re.findall(r"(?:emove|emoved) (\d+) key", out)]

    dry_run = cli("clean", "--cleared", "--older-than", cutoff, "--dry-run")
    real = cli("clean", "--cleared", "--older-than", cutoff, "-y")
    assert instance.keys() == []
    assert sum(removed(dry_run)) == sum(removed(real)), (dry_run, real)


def test_clean_cleared_keeps_what_a_task_choosing_always_keeps_while_its_next_try_starts(instance, cli):
    """
    A task choosing ``keep_task_state = "always"``, cleared after success: its next try has started
    and the task runner has uploaded its rendered fields (as Airflow's task runner does after
    rendering templates, before the task's code runs), but its code has not touched state yet.
    ``clean --cleared`` now (an upgrade's first step, while the deployment runs) must not remove the
    key that try is about to resume from: its first touch keeps it (it does without the clean).
    """
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    instance.running()
    instance.first_touch(keep="always")  # try 1's process records the task's choice...
    instance.write("job")  # ...and writes the key it resumes from; try 1 then succeeds
    instance.ends("success")
    instance.cleared()
    instance.scheduled()
    instance.running()
    with create_session() as session:  # the task runner's rendered fields replace try 1's
        ti = instance._ti(session)
        session.scalar(select(TI).where(TI.id == ti.id)).update_rtif({"bash_command": "run"}, session=session)
    cli("clean", "--cleared", "-y")
    instance.first_touch(keep="always")
    assert instance.keys() == ["job"]


def test_clean_cleared_carries_on_past_a_dag_run_deleted_while_it_works(run_id, cli, monkeypatch):
    """
    ``clean --cleared`` reads every run's try history; on a large deployment that takes minutes,
    and a dag run deleted meanwhile (the UI, ``airflow db clean``) takes its state with it. The
    clean must carry on with the other runs, as ``export`` does, not stop there with a one-line
    "no dag run" error that leaves the rest of the deployment uncleaned.
    """
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    doomed_run = f"doomed_{uuid.uuid4().hex[:8]}"
    with create_session() as session:
        create_run(doomed_run, session)
    doomed = Instance(doomed_run, "t0")
    doomed._set(state="success")
    doomed.write("job")
    doomed.cleared()
    kept_elsewhere = Instance(run_id, f"t{next(_fresh)}")
    kept_elsewhere.write("job")
    kept_elsewhere.cleared()

    listed = manage.runs_with_archived_tries

    def deleted_once_listed(session):
        runs = listed(session)
        assert (DAG_ID, doomed_run) in runs and (DAG_ID, run_id) in runs
        with create_session() as other:  # as the UI or `airflow db clean` would, meanwhile
            other.execute(delete(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == doomed_run))
        return sorted(runs, key=lambda run: run != (DAG_ID, doomed_run))  # the deleted one first

    monkeypatch.setattr(manage, "runs_with_archived_tries", deleted_once_listed)
    out = cli("clean", "--cleared", "-y")
    assert "that clears left" in out
    assert kept_elsewhere.keys() == []
