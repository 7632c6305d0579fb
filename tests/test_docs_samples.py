"""
Every Python sample of the documentation runs.

Task code runs as tasks of one DAG under the real `airflow dags test` (tasks in-process, state on
the run's database); server-side code runs here against the configured backend; the Redis sample
against a real Redis; backend-author samples against the conformance kit. A sample only shows the
part a reader writes, so each gets a few stand-ins (STAND_INS: `submit()`, an asset `ORDERS`...);
everything the sample itself names is real.
"""

from __future__ import annotations

import ast
import asyncio
import json
import textwrap

import pytest
from airflow_shared.state import AssetScope, TaskScope
from sqlalchemy import select
from state_testing.airflow_cli import run_airflow
from state_testing.doc_samples import REPO, all_samples, try_it_samples

pytestmark = pytest.mark.any_database

DAG_ID = "docs_samples"

# What the samples take from their surroundings: the reader's own functions and assets.
STAND_INS = """
from airflow.sdk import Asset, BaseOperator
from airflow_task_state.example_dags import simulated_jobs
from airflow_task_state.example_dags.simulated_jobs import SimulatedJobTrigger

ORDERS = Asset("docs_orders")
EVENTS = Asset("docs_events")
batch_id, batch, job_id = 7, [1, 2, 3], "app_001"
partitions, done = range(10), {7: 700, 8: 800}
item = {"id": 7}


def submit():
    return "app_001"


def wait_for(job_id):
    return f"{job_id} finished"


def load_rows_after(previous):
    return previous + 100


def publish(watermark):
    pass


class MyOperator(BaseOperator):
    def execute(self, context):
        pass


class emr:  # an EMR client whose steps are simulated jobs (processes that sleep)
    add_step = staticmethod(simulated_jobs.submit)
    status = staticmethod(simulated_jobs.status)
    output = staticmethod(simulated_jobs.result)


def EmrStepTrigger(job_id, poll_interval):
    return SimulatedJobTrigger(job_id=job_id, poll_interval=0.2)
"""

# Task-code samples that are the body of a task run one after the other in one task of the DAG
# (a task per sample would cost Airflow's start of a task each), each followed by a check of what
# it did. Its outlets are what the bodies' asset writes need.
BODIES = {
    "task-code-basic": "assert job_id == 'app_001' and task_state.get('remote_job_id') == 'app_001'",
    "task-code-versions": (
        "assert current.version == 1 and task_state.get_versioned('cursor') == ({'page': 2}, 2)\n"
        "assert task_state.get('owner') == 'try-1' and rows == 3"
    ),
    "task-code-many": (
        "assert offsets == {} and task_state.get_many(['partition-7', 'partition-8']) == {}\n"
        "assert task_state.get('cursor') == 'page-3'"
    ),
    "clearing-item-key": "assert key == 'job:7' and job_id is None",
    "large-values-task": (
        "assert len(results['results']) == 5000 and task_state.get_bytes('frontier') == bytes(10_000_000)"
    ),
}
BODIES_OUTLETS = "[ORDERS]"
# Samples that define tasks or operators run as the DAG file's code; then the tasks they define
# join the DAG.
DEFINITIONS = {
    "readme-task": "run_job.override(task_id='readme_task')()",
    "core-example": (
        "run_job.override(task_id='core_run_job')()\nincremental_load.override(task_id='core_load')()"
    ),
    "staged-writes": "load_new_events.override(task_id='staged_writes')()",
    # Attributes only, outside the DAG: its operators need not run.
    "clearing-keep-choice": (
        "assert SparkSubmitOperator.keep_task_state == 'always' and etl.keep_task_state == 'never'"
    ),
    "resumable-deferrable": "op = EmrStepOperator(task_id='resumable_deferrable'); op.step = 1.0",
}
OUTSIDE_DAG = "clearing-keep-choice"
TASK_SAMPLES = set(BODIES) | set(DEFINITIONS)
OTHER_SAMPLES = {
    "backend-api",
    "core-server-side",
    "redis-standalone-python",
    "redis-example-validate",
    "redis-example-kit",
    "writing-a-backend-kit",
}


def test_every_python_sample_runs_here():
    python = {name for name, sample in all_samples().items() if sample.lang == "python"}
    # The try-it page's DAG file runs in tests/test_install_from_wheels.py, under airflow standalone.
    assert python - set(try_it_samples()) == TASK_SAMPLES | OTHER_SAMPLES


def dag_file() -> str:
    """A DAG file with the task-code samples, each compiled under its page's name and line, so a
    failure names the page."""
    samples = all_samples()
    bodies = [
        (name, str(samples[name].path), samples[name].line, samples[name].code, check)
        for name, check in BODIES.items()
    ]
    parts = [
        "import ast",
        "import inspect",
        "from datetime import datetime",
        "from airflow.sdk import DAG, task",
        f"STAND_INS = {STAND_INS!r}",
        "",
        "def run(name, where, line, code):",
        "    namespace = {'__name__': 'docs_sample_' + name.replace('-', '_')}",
        "    exec(STAND_INS, namespace)",
        "    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT",
        "    return namespace, eval(compile('\\n' * line + code, where, 'exec', flags=flags), namespace)",
        "",
        "",
        f"BODIES = {bodies!r}",
        "",
        "",
        "async def task_code_bodies():",
        "    for name, where, line, code, check in BODIES:",
        "        namespace, result = run(name, where, line, code)",
        "        if inspect.iscoroutine(result):",
        "            await result",
        "        exec(check, namespace)",
        "",
        "",
        f"_ns, _ = run({OUTSIDE_DAG!r}, {str(samples[OUTSIDE_DAG].path)!r}, {samples[OUTSIDE_DAG].line},"
        f" {samples[OUTSIDE_DAG].code!r})",
        f"exec({DEFINITIONS[OUTSIDE_DAG]!r}, _ns)",
        "",
        f"with DAG({DAG_ID!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:",
        f"    _outlets = eval({BODIES_OUTLETS!r}, run('stand-ins', 'stand-ins', 0, '')[0])",
        "    task(outlets=_outlets)(task_code_bodies)()",
    ]
    for name, join in DEFINITIONS.items():
        if name == OUTSIDE_DAG:
            continue
        sample = samples[name]
        parts += [
            f"    _ns, _ = run({name!r}, {str(sample.path)!r}, {sample.line}, {sample.code!r})",
            f"    exec({join!r}, _ns)",
        ]
    return "\n".join(parts) + "\n"


@pytest.fixture(scope="module")
def docs_dag_run(tmp_path_factory):
    """One real `airflow dags test` of every task-code sample; the run's id and task states."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    folder = tmp_path_factory.mktemp("docs_dags")
    (folder / "docs_samples.py").write_text(dag_file())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(folder))
        mp.setenv("STATE_EXAMPLE_JOBS_DIR", str(tmp_path_factory.mktemp("jobs")))
        # docs/large-values-in-tasks.md's sample stores a file and a value past max_value_bytes.
        mp.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{tmp_path_factory.mktemp('objects')}")
        result = run_airflow("dags", "test", DAG_ID, check=False)
    with create_session() as session:
        run_id = session.scalar(
            select(DagRun.run_id).where(DagRun.dag_id == DAG_ID).order_by(DagRun.id.desc()).limit(1)
        )
        states = dict(
            session.execute(
                select(TaskInstance.task_id, TaskInstance.state).where(
                    TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id
                )
            ).all()
        )
    return run_id, states, result.stdout[-8000:] + result.stderr[-8000:]


@pytest.fixture
def backend():
    from airflow_task_state.metastore.backend import MetastoreStateBackend

    return MetastoreStateBackend()


@pytest.fixture
def make_dag_run():
    """Create real dag_run rows the server-side samples name; removed afterwards."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import delete

    created = []

    def make(dag_id: str, run_id: str) -> None:
        with create_session() as session:
            session.add(
                DagRun(dag_id=dag_id, run_id=run_id, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING)
            )
        created.append((dag_id, run_id))

    yield make
    with create_session() as session:
        for dag_id, run_id in created:
            session.execute(delete(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def asset_id(name: str) -> int:
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.scalar(select(AssetModel.id).where(AssetModel.name == name))


def test_task_code_samples_succeed_in_a_real_dag_run(docs_dag_run, backend):
    run_id, states, output = docs_dag_run
    tasks = {
        "readme_task",
        "core_run_job",
        "core_load",
        "staged_writes",
        "resumable_deferrable",
        "task_code_bodies",
    }
    assert states == dict.fromkeys(tasks, "success"), output

    def task_value(task_id: str, key: str):
        stored = backend.get(TaskScope(DAG_ID, run_id, task_id), key)
        return None if stored is None else json.loads(stored)

    # What each sample promises it leaves behind.
    assert task_value("readme_task", "remote_job_id") == "app_001"
    assert task_value("core_run_job", "remote_job_id") == "app_001"
    assert task_value("task_code_bodies", "partition-9") is None  # never written: not in `done`
    assert task_value("task_code_bodies", "owner") == "try-1"
    assert task_value("staged_writes", "last_batch") == {"from": 0, "to": 100}  # committed on success
    assert isinstance(task_value("resumable_deferrable", "remote_job_id"), str)
    orders, events = AssetScope(asset_id("docs_orders")), AssetScope(asset_id("docs_events"))
    assert json.loads(backend.get(orders, "seen")) == [7]
    assert json.loads(backend.get(orders, "rows_loaded")) == 3
    assert json.loads(backend.get(orders, "high")) == 99
    assert json.loads(backend.get(events, "watermark")) == 100
    assert json.loads(backend.get(events, "rows_loaded")) == 100
    assert json.loads(backend.get(AssetScope(asset_id("warehouse_orders")), "watermark")) == 100


def run_sample(name: str, namespace: dict) -> dict:
    """Run a sample here, compiled under its page's name and line; top-level ``await`` allowed."""
    sample = all_samples()[name]
    code = compile(
        "\n" * sample.line + sample.code, str(sample.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    return namespace


@pytest.fixture
def asset_42(backend):
    """The asset the backend-API sample names by id 42: made for the test unless another test's
    asset already has that id; its state is empty before and after."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    scope = AssetScope(asset_id=42)
    with create_session() as session:
        made = session.get(AssetModel, 42) is None
        if made:
            session.add(AssetModel(id=42, name="docs_asset_42", uri="s3://docs/42", group="asset"))
    backend.clear(scope)
    yield scope
    backend.clear(scope)
    if made:
        with create_session() as session:
            session.delete(session.get(AssetModel, 42))


def test_the_backend_api_sample_runs_on_the_configured_backend(make_dag_run, asset_42):
    make_dag_run("spark_pipeline", "manual__2026-11-30")
    ns = run_sample("backend-api", {})
    scope = ns["scope"]
    assert ns["first"].key == "remote_job_id" and ns["page"].total == 1
    assert ns["version"] == 1
    assert ns["backend"].get_versioned(scope, "cursor").value == '{"page": 2}'
    assert ns["backend"].get(asset_42, "rows") == "500"
    assert ns["backend"].keys(scope) == ["cursor"]  # the batch was deleted again


def test_the_core_readme_server_side_sample_runs(make_dag_run, backend):
    make_dag_run("my_dag", "manual__2026-11-30")
    ns = run_sample("core-server-side", {})
    assert ns["scope"].dag_run_uid and ns["backend"].get(ns["scope"], "remote_job_id") is None


def test_the_redis_sample_runs_on_a_real_redis(redis_url):
    sample = all_samples()["redis-standalone-python"]
    assert '"redis://localhost:6379/0"' in sample.code
    # The same code, on the test's server instead of localhost's default port.
    ns: dict = {}
    code = sample.code.replace('"redis://localhost:6379/0"', repr(redis_url))
    exec(compile("\n" * sample.line + code, str(sample.path), "exec"), ns)
    from airflow_state_redis import RedisStateBackend

    check = RedisStateBackend(redis_url, key_prefix="myteam:state")
    try:
        assert check.get(ns["scope"], "remote_job_id") == '"app_001"'
        assert check.get(AssetScope(asset_id=7), "watermark") == "100"
    finally:
        check.clear(ns["scope"])
        check.clear(AssetScope(asset_id=7))
        check.close()


def test_the_validate_first_sample_refuses_bad_input_before_any_io():
    ns = run_sample("redis-example-validate", {})

    class Complete(ns["MyBackend"]):  # the sample shows set() only
        get = delete = clear = None

    with pytest.raises(ValueError):
        Complete().set(TaskScope("d", "r", "t", dag_run_uid="1.1"), "", "1")


def test_the_redis_kit_sample_is_the_providers_conformance_test():
    sample_class = class_named(ast.parse(all_samples()["redis-example-kit"].code), "TestRedisConformance")
    test_file = REPO / "providers/redis/tests/test_redis_conformance.py"
    real_class = class_named(ast.parse(test_file.read_text()), "TestRedisConformance")
    assert ast.dump(sample_class) == ast.dump(real_class), f"the sample differs from {test_file}"


def class_named(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    return found


def test_the_conformance_kit_sample_runs_the_kit(pytester):
    # MyBackend(url=...) is the reader's; the dict backend the kit ships stands in for it.
    stand_in = textwrap.dedent(
        """
        from airflow_shared.state.testing import MemoryStateBackend


        class MyBackend(MemoryStateBackend):
            def __init__(self, url):
                super().__init__()
        """
    )
    pytester.makepyfile(test_my_backend=stand_in + all_samples()["writing-a-backend-kit"].code)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 50 and not outcomes.get("failed"), result.stdout.str()[-3000:]
