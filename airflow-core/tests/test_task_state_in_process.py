"""
Task code using task_state/asset_state, run by the real `airflow dags test` (tasks in-process,
no API server) on the database of the run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import airflow_task_state.example_dags as example_dags
import pytest
from airflow_shared.state import AssetScope, TaskScope
from sqlalchemy import select
from state_testing.airflow_cli import run_airflow

TEST_DAGS = Path(__file__).parent / "dags"
EXAMPLE_DAGS = Path(example_dags.__file__).parent


@pytest.fixture(scope="module")
def dags_test(tmp_path_factory):
    """Run `airflow dags test DAG_ID` on a DAG folder; return its output and the new run's id."""

    serialized: set[Path] = set()

    def run(folder: Path, dag_id: str, *extra: str) -> tuple[str, str]:
        # Each run gets its own folder of simulated jobs, kept as run.jobs for the test to count.
        run.jobs = jobs = tmp_path_factory.mktemp("jobs")
        # INFO: the tests read what tasks returned from the "Done. Returned value was" log line.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(folder))
            mp.setenv("STATE_EXAMPLE_JOBS_DIR", str(jobs))
            mp.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
            if folder not in serialized:  # the files do not change during the module: once a folder
                run_airflow("dags", "reserialize")
                serialized.add(folder)
            result = run_airflow("dags", "test", dag_id, *extra)
        return result.stdout + result.stderr, latest_run_id(dag_id)

    yield run


def latest_run_id(dag_id: str) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.scalar(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(1)
        )


def returned(output: str) -> dict:
    """The dict a task returned, from its 'Done. Returned value was: ...' log line (tasks returning
    None, like the DAG's helper task, are passed over: their order in the output is not fixed)."""
    marker = "Done. Returned value was: "
    values = [
        ast.literal_eval(line.split(marker, 1)[1].rsplit(" [airflow", 1)[0])
        for line in output.splitlines()
        if marker in line
    ]
    dicts = [value for value in values if isinstance(value, dict)]
    assert dicts, output[-3000:]
    return dicts[-1]


def test_state_written_by_try_1_is_read_by_try_2(dags_test, backend):
    output, run_id = dags_test(TEST_DAGS, "state_shared_across_tries")
    assert "fail try 1 after storing the job" in output
    assert returned(output) == {"try": 2, "stored": {"id": "app_001", "submitted_by_try": 1}}
    scope = TaskScope("state_shared_across_tries", run_id, "remember")
    assert backend.get(scope, "job") == '{"id":"app_001","submitted_by_try":1}'


def test_the_task_facing_api(dags_test, backend):
    output, run_id = dags_test(TEST_DAGS, "state_api_surface")
    out = returned(output)
    assert out["round_trip"] == [{"nested": [1, 2.5, "ü", True]}, 0, "", "odd key"]
    assert out["default"] == "fallback"
    assert out["keys"] == ["a/b c%d", "dict", "empty", "zero"]
    assert out["after_delete"] == ["a/b c%d", "dict", "empty"]
    assert "accepted" not in out
    assert out["refused"] == ["ValueError", "ValueError", "ValueError", "TypeError", "ValueError"]
    assert out["by_name"] == out["by_uri"] == 7
    assert "does not declare this asset" in out["undeclared"]
    # An inlet may be read, never written: that needs the asset among the task's outlets.
    assert out["inlet_read"] == "unset"
    assert "as an inlet only" in out["inlet_write"] and "outlets" in out["inlet_write"]
    assert out["after_clear"] == []
    assert backend.keys(TaskScope("state_api_surface", run_id, "exercise")) == ["kept"]
    # Batches: one request each, sync and async, task and asset state.
    assert out["batch_versions"] == [1]
    assert out["batch_read_back"] is True
    assert out["batch_requests"] == 3  # 100 keys written, read and 50 deleted: three requests
    assert out["batch_left"] == 50
    assert "the value of key 'bad'" in out["batch_refused"]
    assert out["batch_after_refusal"] == {"partition-99": 99000}  # the refused batch wrote nothing
    assert out["asset_batch"] == {"low": 1, "high": 9}
    assert out["asset_batch_after_delete"] == {}
    assert out["async_batch"] == {"b": {"c": None}}


@pytest.mark.any_database
def test_resumable_job_without_crash_submits_once(dags_test, backend):
    output, run_id = dags_test(EXAMPLE_DAGS, "example_resumable_job", "-c", '{"crash_first_try": false}')
    assert "Submitted job" in output
    submitted = sorted(p.stem for p in dags_test.jobs.glob("*.submitted"))
    assert len(submitted) == 1
    stored = backend.get(TaskScope("example_resumable_job", run_id, "run_job"), "remote_job_id")
    assert stored == f'"{submitted[0]}"'


@pytest.mark.any_database
def test_resumable_job_resubmits_only_a_failed_job(dags_test, backend):
    output, run_id = dags_test(TEST_DAGS, "state_resubmits_failed_job")
    assert "remote job" in output and "failed" in output
    first, second = sorted(dags_test.jobs.glob("*.submitted"), key=lambda p: p.stat().st_mtime)
    assert f"Stored job {first.stem} failed; submitting a new one" in output
    from airflow.utils.session import create_session
    from airflow_task_state.metastore.models import TaskStateModel

    with create_session() as session:
        value, by_try = session.execute(
            select(TaskStateModel.value, TaskStateModel.updated_by_try).where(
                TaskStateModel.run_id == run_id, TaskStateModel.key == "remote_job_id"
            )
        ).one()
    assert (value, by_try) == (f'"{second.stem}"', 2)
    assert (dags_test.jobs / f"{second.stem}.result").exists()


@pytest.mark.any_database
def test_mapped_instances_keep_separate_state(dags_test, backend):
    _, run_id = dags_test(EXAMPLE_DAGS, "example_mapped_state")
    for index in (0, 1, 2):
        scope = TaskScope("example_mapped_state", run_id, "process", index)
        assert backend.get(scope, "partition") == str(index)
        assert backend.get(scope, "offset") == str(index * 1000)
        assert backend.keys(scope) == ["offset", "partition"]


@pytest.mark.any_database
def test_async_task_uses_aget_and_aset(dags_test, backend):
    output, run_id = dags_test(EXAMPLE_DAGS, "example_async_state")
    assert returned(output) == {"resumed_from": 0, "keys": ["checkpoint"]}
    assert backend.get(TaskScope("example_async_state", run_id, "crawl"), "checkpoint") == '{"page":3}'


@pytest.mark.any_database
def test_asset_watermark_is_read_by_the_next_run(dags_test, backend):
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    first, _ = dags_test(EXAMPLE_DAGS, "example_asset_watermark")
    second, _ = dags_test(EXAMPLE_DAGS, "example_asset_watermark")
    assert returned(first)["watermark"] + 100 == returned(second)["watermark"]
    assert returned(second)["previous"] == returned(first)["watermark"]
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == "orders"))
    assert backend.get(AssetScope(asset_id), "watermark") == str(returned(second)["watermark"])


def load_corpus():
    """The key corpus, from the DAG file the tasks run."""
    spec = importlib.util.spec_from_file_location("state_key_corpus", TEST_DAGS / "state_key_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_key_reaches_the_backend_exactly_as_written(dags_test, backend):
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    corpus = load_corpus()
    output, run_id = dags_test(TEST_DAGS, "state_key_corpus")
    summary = {"stored": len(corpus.CORPUS), "refused": len(corpus.REFUSED)}
    assert returned(output) == {"task_keys_at_start": 0, "task": summary, "asset": summary}
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == "state_key_corpus"))
    for scope in (TaskScope("state_key_corpus", run_id, "round_trip_every_key"), AssetScope(asset_id)):
        assert backend.keys(scope) == sorted(corpus.CORPUS)
        for i, key in enumerate(corpus.CORPUS):
            assert json.loads(backend.get(scope, key)) == {"i": i, "key": key}


@pytest.mark.any_database
def test_resumable_job_accepts_plain_string_statuses(monkeypatch):
    """
    A `job_status` returning "running" rather than JobStatus.RUNNING keeps the task waiting, on a
    fresh submit and on a reconnect; a status that is neither is refused with the allowed values.
    """
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(TEST_DAGS))
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    run_airflow("dags", "reserialize")
    # The DAG run fails (its unknown_status task does), which `airflow dags test` may report in its
    # exit code: the test reads the output instead.
    result = run_airflow("dags", "test", "state_resumable_plain_status", check=False)
    output = result.stdout + result.stderr
    assert "Reconnecting to job job-reconnects (running) from an earlier try" in output, output[-3000:]
    # Three "running" answers (the first on reconnecting), then "succeeded", all on try 2.
    assert "Job job-reconnects done after 4 status checks on try 2" in output, output[-3000:]
    assert (
        "PlainStatusOperator.job_status returned 'lost' for job job-unknown_status; "
        "expected a JobStatus or one of 'running', 'succeeded', 'failed'"
    ) in output, output[-3000:]


# --- versions, expiry, increments, update, clear on success --------------------------


def test_versions_ttl_increment_and_update_as_task_code_sees_them(dags_test, backend):
    output, run_id = dags_test(TEST_DAGS, "state_versions_surface")
    out = returned(output)
    assert out["counts"] == [1, 2, 3, 2]
    assert "not an integer" in out["increment_text"] and out["text_kept"] == "forty"
    assert out["versions"] == [1, 2]
    assert out["versioned"] == ("b", 2) and out["is_versioned"] and out["missing_versioned"] is None
    assert out["conflict"] == ["cas", 1, 2]
    assert out["bad_ttl"] == [
        "ValueError",
        "ValueError",
        "ValueError",
        "ValueError",
        "TypeError",
        "ValueError",
    ]
    assert out["bad_if_version"] == ["ValueError", "TypeError", "TypeError"]
    # The concurrent write is kept: fn ran again on top of it.
    assert out["updated"] == out["log"] == ["start", "intruder", "mine"] and out["update_calls"] == 2
    assert out["many"] == list(range(12))
    assert out["gave_up_after"] == 3
    assert out["async"] == {
        "aincrement": 7,
        "aupdate": 14,
        "aupdate_sync_fn": 15,
        "aget_versioned": (15, 4),
    }
    assert out["asset"] == [5, 6]
    scope = TaskScope("state_versions_surface", run_id, "exercise")
    entries = {entry.key: entry for entry in backend.entries(scope).entries}
    assert "bad" not in entries
    assert entries["forever"].expires_at is None
    now = datetime.now(UTC)
    assert timedelta(minutes=59) < entries["hour"].expires_at - now <= timedelta(hours=1)
    assert timedelta(seconds=30) < entries["seconds"].expires_at - now <= timedelta(seconds=90)
    # No ttl: the default retention, 30 days.
    assert timedelta(days=29) < entries["rows"].expires_at - now <= timedelta(days=30)


@pytest.mark.any_database
def test_clear_task_state_on_success_clears_only_the_task_that_asks(dags_test, backend, monkeypatch):
    _, run_id = dags_test(TEST_DAGS, "state_clear_on_success")
    assert backend.keys(TaskScope("state_clear_on_success", run_id, "clears")) == []
    assert backend.keys(TaskScope("state_clear_on_success", run_id, "keeps")) == ["kept"]
    # [state] clear_on_success clears every task that does not opt out.
    monkeypatch.setenv("AIRFLOW__STATE__CLEAR_ON_SUCCESS", "True")
    _, run_id = dags_test(TEST_DAGS, "state_clear_on_success")
    assert backend.keys(TaskScope("state_clear_on_success", run_id, "keeps")) == []


# --- the deferrable resumable-job mixin, triggers run inline by `airflow dags test` ---------


def submitted_jobs(folder: Path) -> list[str]:
    return sorted(path.stem for path in folder.glob("*.submitted"))


def return_value(dag_id: str, run_id: str, task_id: str = "run_job"):
    """What the task returned (its return_value XCom); a task resumed from deferral logs no "Done." line."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalar(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        )
        return XComModel.deserialize_value(row)


@pytest.mark.any_database
def test_deferrable_job_submits_once_defers_and_completes_from_task_state(dags_test, backend):
    output, run_id = dags_test(
        EXAMPLE_DAGS, "example_deferrable_resumable_job", "-c", '{"crash_first_try": false}'
    )
    [job] = submitted_jobs(dags_test.jobs)
    assert f"Submitted job {job} and stored its id in task state" in output, output[-3000:]
    assert f"Deferring on job {job}" in output
    # execute_complete ran (same try, after the trigger fired) and found the id in task state.
    assert f"Resumed after deferral: job {job} (from task state) succeeded" in output
    assert return_value("example_deferrable_resumable_job", run_id) == f"42 rows processed by {job}"
    stored = backend.get(TaskScope("example_deferrable_resumable_job", run_id, "run_job"), "remote_job_id")
    assert stored == f'"{job}"'


@pytest.mark.any_database
def test_deferrable_job_resubmits_only_a_failed_job(dags_test, backend):
    output, run_id = dags_test(TEST_DAGS, "state_deferrable_resubmits_failed_job")
    first, second = sorted(dags_test.jobs.glob("*.submitted"), key=lambda p: p.stat().st_mtime)
    assert f"Resumed after deferral: job {first.stem} (from task state) failed" in output, output[-3000:]
    assert f"Stored job {first.stem} failed; submitting a new one" in output
    result = return_value("state_deferrable_resubmits_failed_job", run_id)
    assert result == f"42 rows processed by {second.stem}"
    scope = TaskScope("state_deferrable_resubmits_failed_job", run_id, "run_job")
    stored = backend.get(scope, "remote_job_id")
    assert stored == f'"{second.stem}"'


@pytest.mark.any_database
def test_resumable_job_decisions_and_item_keys(dags_test):
    output, _ = dags_test(TEST_DAGS, "state_deferrable_decisions")
    out = returned(output)
    job = out["first_execute"]["job_id"]
    trigger = "airflow_task_state.example_dags.simulated_jobs.SimulatedJobTrigger"
    assert out["empty"] == ["submit", None, "no job stored in task state"]
    # No job stored: submit, store the id, then defer on a trigger watching that job.
    assert out["first_execute"] == {"method": "execute_complete", "trigger": trigger, "job_id": job}
    assert out["stored_after_submit"] == job
    # Stored and running: defer on the same job, submit nothing.
    assert out["running"] == ["reconnect", job, f"stored job {job} is running"]
    assert out["second_execute"] == out["first_execute"]
    assert out["early_event_refused"] == f"RuntimeError: the trigger fired while job {job} is still running"
    # Stored and succeeded: the result at once, no deferral.
    assert out["succeeded"] == ["already_succeeded", job, f"stored job {job} succeeded"]
    assert out["third_execute"] == {"returned": f"42 rows processed by {job}"}
    assert out["complete"] == f"42 rows processed by {job}"
    assert out["failed_event"] == f"RuntimeError: remote job {job} failed"
    assert out["other_jobs_event"].startswith(
        f"RuntimeError: the trigger reported on job app_other, but task state now holds job {job}"
    )
    assert out["junk_event"].startswith(
        "ValueError: DeferrableSimulatedJobOperator resumed with event 'done'"
    )
    assert out["jobs_so_far"] == [job]
    # Stored and failed: a new job.
    assert out["failed"] == ["submit", "app_vanished", "stored job app_vanished failed"]
    new_job = out["after_failed_execute"]["job_id"]
    assert new_job not in ("app_vanished", job)
    assert out["stored_after_resubmit"] == new_job
    assert "task state has no 'remote_job_id'" in out["complete_without_state"]
    # Item keys: stored with the id; another item's job is not reconnected to.
    job_a, job_b = out["item_a_execute"]["job_id"], out["item_b_execute"]["job_id"]
    assert out["stored_with_item"] == {"job_id": job_a, "job_key": "s3://bucket/a.csv"}
    assert out["item_a_again"][0] == "reconnect"
    assert out["item_b"] == [
        "submit",
        job_a,
        f"stored job {job_a} was submitted for item 's3://bucket/a.csv', this try works on 's3://bucket/b.csv'",
    ]
    assert job_b != job_a
    assert out["item_a_after_b"] == "submit"
    assert out["bad_key"].startswith("TypeError: ItemOperator.job_key returned 3 (int)")
    assert out["bare_id_with_key"] == "reconnect"
    # The waiting mixin: the same item-keyed storage, and a succeeded job is not waited on again.
    sync_job = out["sync_stored"]["job_id"]
    assert out["sync_stored"] == {"job_id": sync_job, "job_key": "s3://bucket/c.csv"}
    assert out["sync_returned"] == out["sync_returned_again"] == f"42 rows processed by {sync_job}"
    assert out["sync_again"] == "already_succeeded"
    assert out["jobs_total"] == 5
