"""
The harness's production-shaped deployment: the CeleryExecutor with a Redis broker, and a real
`airflow celery worker` that holds no secret able to sign Airflow tokens, no `[state]` setting and
no metadata database. One tiny DAG runs there; the checks are about where and how it ran.

The broker tests then show what that worker can still reach: the Celery broker, which carries every
running task's Airflow token (Airflow 3.2's own exposure, see the README's "Per executor" subsection),
and how far a broker credential confined to one team's keys narrows it.
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import jwt
import psutil
import pytest
import redis
from celery import Celery
from state_testing.deployment import CELERY_WORKER, Deployment

DAG_ID = "celery_smoke"
RUN_ID = "celery_smoke_1"


def forbidden(name: str) -> bool:
    """What no worker may hold: the token signing secret and any setting of the task-state feature."""
    return name == "AIRFLOW__API_AUTH__JWT_SECRET" or name.startswith("AIRFLOW__STATE__")


@pytest.fixture(scope="module")
def marker(deployment: Deployment, markers: Path) -> dict:
    """Run the DAG once; what its task recorded about the process it ran in."""
    deployment.wait_for_dag(DAG_ID, timeout=90)
    deployment.trigger(DAG_ID, RUN_ID)
    assert deployment.wait_for_run(DAG_ID, RUN_ID, timeout=120) == "success", deployment.logs()
    return json.loads((markers / f"{RUN_ID}.json").read_text())


def test_the_task_ran_under_the_celery_worker(deployment, marker):
    # The task process descends from the `airflow celery worker` process, not from the scheduler.
    assert deployment.processes[CELERY_WORKER].pid in marker["ancestors"]
    assert deployment.processes["scheduler"].pid not in marker["ancestors"]

    [ti] = deployment.query(
        "SELECT state, external_executor_id FROM task_instance WHERE dag_id = :d AND run_id = :r",
        d=DAG_ID,
        r=RUN_ID,
    )
    # The CeleryExecutor records the Celery task's id; the LocalExecutor records none.
    assert ti["state"] == "success"
    assert ti["external_executor_id"]
    assert ti["external_executor_id"] in (deployment.home / f"{CELERY_WORKER}.log").read_text()
    [row] = deployment.query(
        "SELECT value FROM xcom WHERE dag_id = :d AND run_id = :r AND key = 'return_value'",
        d=DAG_ID,
        r=RUN_ID,
    )
    # A JSON column: psycopg2 decodes it.
    assert row["value"] == "ran"


def test_the_worker_and_its_tasks_hold_no_signing_secret_and_no_state_setting(deployment, marker):
    assert deployment.worker_env is not None
    # The real environment of the running worker, not only what the harness meant to give it
    # (readable because the harness sets SPT_NOENV: setproctitle leaves /proc/<pid>/environ alone).
    worker = psutil.Process(deployment.processes[CELERY_WORKER].pid)
    environ = worker.environ()
    assert environ["AIRFLOW_HOME"] == str(deployment.worker_home)
    for variables in (deployment.worker_env, environ, marker["airflow_variables"]):
        assert not [name for name in variables if forbidden(name)]
    # Whatever database URL the worker has, it is not the metadata database's.
    assert deployment.sql_alchemy_conn not in environ.values()
    # The other components do hold the secret, under this name.
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in deployment.env


def jwt_secret_in(config_file: Path) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config_file)
    return parser.get("api_auth", "jwt_secret", fallback="")


def test_the_worker_home_has_no_configuration_with_a_jwt_secret(deployment, marker):
    # The other components' home has one: the first `airflow` command wrote it, secrets and all.
    assert jwt_secret_in(deployment.home / "airflow.cfg")
    assert deployment.worker_home.is_relative_to(deployment.home)
    assert (deployment.worker_home / "airflow.cfg").is_file()
    secret = deployment.env["AIRFLOW__API_AUTH__JWT_SECRET"]
    for path in deployment.worker_home.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
            if path.suffix == ".cfg":
                assert not jwt_secret_in(path), path


# -- the broker -----------------------------------------------------------------------------------


def test_any_task_reads_another_running_tasks_airflow_token_from_the_broker(deployment, markers):
    """
    Airflow 3.2's inherited exposure, asserted as it is today. A hostile task reads the broker with
    the URL every Celery worker holds and finds another DAG's running task's Execution API token
    twice over: in kombu's ``unacked`` hash, where ``task_acks_late`` keeps a message until its task
    ends, and in Celery's ``inspect active``, which answers with every running task's arguments.
    Airflow's Execution API accepts the token as that task (a ``ti:self`` route). No key of ours is
    involved and none could stop it; what a deployer does is in the README ("Per executor: where a
    running task's Airflow token can be read"). If Airflow stops sending the token in the message,
    this fails: rewrite that README paragraph.
    """
    deployment.wait_for_dag("broker_victim", timeout=90)
    deployment.wait_for_dag("broker_hostile", timeout=90)
    deployment.trigger("broker_victim", "broker_victim_1")
    deployment._wait(lambda: (markers / "broker-victim-ready").exists(), 120, "the victim to run")
    [victim] = deployment.query("SELECT id, state FROM task_instance WHERE run_id = 'broker_victim_1'")
    assert victim["state"] == "running"
    victim_id = str(victim["id"])

    deployment.trigger("broker_hostile", "broker_hostile_1", conf={"victim_ti_id": victim_id})
    assert deployment.wait_for_run("broker_hostile", "broker_hostile_1", timeout=120) == "success", (
        deployment.logs()
    )
    report = json.loads((markers / "broker-hostile.json").read_text())

    # Both running tasks' messages are in the broker (nothing waits in the queue), each with its token.
    assert report["queued"] == 0
    stolen = report["unacked"][victim_id]
    assert len(report["unacked"]) == 2
    assert report["inspect_active"][victim_id] == stolen
    # A real Airflow token for the victim: signed with the key only the scheduler and API server hold.
    claims = jwt.decode(
        stolen,
        deployment.env["AIRFLOW__API_AUTH__JWT_SECRET"],
        algorithms=["HS512"],
        options={"verify_aud": False},
    )
    assert claims["sub"] == victim_id == report["claims"]["sub"]
    # Issued when the scheduler queued the try, for [execution_api] jwt_expiration_time (600 s by
    # default): the window in which a copy read from the broker is still good.
    assert claims["exp"] - claims["iat"] == 600

    # Airflow refuses the victim's rendered fields to no token and to the hostile task's own token,
    # and accepts them with the stolen one.
    assert report["rtif_no_token"] in (401, 403)
    assert report["rtif_own_token"] == 403
    assert report["rtif_stolen_token"] == 201
    [fields] = deployment.query(
        "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = 'broker_victim'"
    )
    rendered = fields["rendered_fields"]
    rendered = json.loads(rendered) if isinstance(rendered, str) else rendered
    assert rendered == {"broker_exposure": "written by broker_hostile"}

    # Not in the result backend: Celery stores arguments there only with result_extended.
    results = redis.Redis.from_url(deployment.env["AIRFLOW__CELERY__RESULT_BACKEND"])
    assert results.dbsize() > 0
    assert not [key for key in results.scan_iter(_type="STRING") if stolen.encode() in results.get(key)]

    (markers / "release-broker-victim").write_text("")
    assert deployment.wait_for_run("broker_victim", "broker_victim_1", timeout=120) == "success"
    # Acknowledged: once its task has ended, a message leaves the broker, token and all.
    broker = redis.Redis.from_url(deployment.broker_url)
    deployment._wait(lambda: not broker.hlen("unacked"), 30, "the broker to drop acknowledged messages")


TEAM_PASSWORD = "team-password"


def confine_to_team(broker: redis.Redis, team: str) -> None:
    """
    A Redis ACL user for one team's Celery workers: keys and channels under the team's prefix only,
    no administrative commands. kombu subscribes with PSUBSCRIBE, whose pattern Redis compares
    literally with the user's channel patterns, so the two it uses are named: remote control, and
    the other workers' events (gossip, on by default in `airflow celery worker`).
    """
    broker.execute_command(
        "ACL", "SETUSER", team, "reset", "on", f">{TEAM_PASSWORD}", f"~{team}.*", f"&{team}.*",
        f"&{team}./0.celery.pidbox", f"&{team}./0.celeryev/worker.*", "+@all", "-@dangerous",
    )  # fmt: skip


def in_flight_args(broker: redis.Redis, key: str) -> list:
    """The arguments of every message in a kombu ``unacked`` hash: [message, exchange, routing key]."""
    found = []
    for raw in broker.hvals(key):
        message, _exchange, _routing_key = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found.append(args)
    return found


@contextlib.contextmanager
def running_worker(app: Celery) -> Iterator[None]:
    """
    A Celery worker in a thread, with what `airflow celery worker` leaves on by default and Celery's
    start_worker turns off: gossip, mingle, heartbeats; and task events.
    """
    from celery.contrib.testing.worker import TestWorkController, setup_app_for_worker
    from celery.worker import state

    setup_app_for_worker(app, "WARNING", None)
    worker = TestWorkController(
        app=app,
        pool="threads",
        concurrency=1,
        hostname=f"{app.main}@test",
        without_gossip=False,
        without_mingle=False,
        without_heartbeat=False,
        task_events=True,
    )
    thread = threading.Thread(target=worker.start, daemon=True)
    thread.start()
    worker.ensure_started()
    try:
        yield
    finally:
        # How Celery's own start_worker stops its thread.
        state.should_terminate = 0
        thread.join(30)
        state.should_terminate = None
        assert not thread.is_alive()


def team_app(broker_url: str, team: str) -> Celery:
    """A Celery app as a team's Airflow workers would run it: its own user, its own key prefix."""
    app = Celery(team, broker=broker_url.replace("redis://", f"redis://{team}:{TEAM_PASSWORD}@", 1))
    app.conf.update(
        # What [celery_broker_transport_options] global_keyprefix sets in Airflow (default_celery.py).
        broker_transport_options={"global_keyprefix": f"{team}."},
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_default_queue="default",
        broker_connection_retry_on_startup=False,
    )
    return app


def test_a_broker_user_confined_to_its_teams_key_prefix_reads_nothing_of_another_team(deployment):
    """
    The mitigation the README describes, on this deployment's Redis broker: each team's workers use a
    Redis ACL user confined to keys and channels under the team's kombu ``global_keyprefix``, which
    kombu puts before every key (``unacked`` included) and every channel. Team b's worker runs a task
    under acks_late with such a user, so legitimate use works; team a's user can neither read team
    b's in-flight message nor its queue, nor reach team b's worker by remote control, nor read the
    unprefixed keys the Airflow worker here uses. Without prefixes, per-queue ACLs could not do
    this: one ``unacked`` hash holds the in-flight messages of every queue, and every worker reads
    it (kombu's QoS.restore_visible). Airflow 3.2 gives each team such settings only through
    multi-team executors; that part is not run here.
    """
    admin = redis.Redis.from_url(deployment.broker_url)
    admin.acl_log_reset()
    for team in ("team_a", "team_b"):
        confine_to_team(admin, team)
    release = threading.Event()
    team_b = team_app(deployment.broker_url, "team_b")

    @team_b.task(name="hold")
    def hold(token: str) -> None:
        release.wait(60)

    team_a = team_app(deployment.broker_url, "team_a")
    as_team_a = redis.Redis.from_url(team_a.conf.broker_url)
    try:
        with running_worker(team_b):
            hold.apply_async(args=["team b's token"])
            deployment._wait(lambda: admin.hlen("team_b.unacked") == 1, 30, "team b's task to run")
            # The broker's default user (what the Airflow worker here holds) reads it; team a cannot.
            assert in_flight_args(admin, "team_b.unacked") == [["team b's token"]]
            for command in [
                ("HGETALL", "team_b.unacked"),
                ("LRANGE", "team_b.default", 0, -1),
                ("HGETALL", "unacked"),
                ("LRANGE", "default", 0, -1),
                ("PUBLISH", "team_b./0.celery.pidbox", "{}"),
                ("KEYS", "*"),
            ]:
                with pytest.raises(redis.exceptions.NoPermissionError):
                    as_team_a.execute_command(*command)
            # Remote control stays within a team: team b sees its own task, team a sees no worker.
            [active] = team_b.control.inspect(timeout=5).active().values()
            assert [request["args"] for request in active] == [["team b's token"]]
            assert team_a.control.inspect(timeout=2).active() is None
            release.set()
            deployment._wait(lambda: not admin.hlen("team_b.unacked"), 30, "team b's task to end")
        # Team b's worker was refused nothing: the ACL fits what a Celery worker does.
        assert [entry for entry in admin.acl_log() if entry["username"] == "team_b"] == []
        assert {entry["username"] for entry in admin.acl_log()} == {"team_a"}
    finally:
        release.set()
        as_team_a.close()
        team_a.close()
        team_b.close()
        admin.execute_command("ACL", "DELUSER", "team_a", "team_b")
