"""
DAGs of the end-to-end tests on Airflow 3.3 (tests/on_airflow33/test_e2e_airflow33.py): task code that
mixes Airflow 3.3's own accessors (``context["task_state_store"]``, ``context["asset_state_store"]``)
with this package's (``task_state``, ``asset_state``) on one store. Tasks report what they saw in
their return value (XCom) or in files under ``STATE_EXAMPLE_JOBS_DIR``; the tests assert.

Each task imports this package's accessors itself, as Airflow's best practices ask of task code, so
a task that does not use them (``af33_clear_keep_always``) runs without them.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, dag, task

MIXED_ASSET = Asset(name="af33_mixed", uri="file:///tmp/af33/mixed")
RETRY = {"retries": 1, "retry_delay": timedelta(seconds=1)}


def _shared() -> Path:
    return Path(os.environ["STATE_EXAMPLE_JOBS_DIR"])


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def af33_mixed():
    @task(outlets=[MIXED_ASSET], **RETRY)
    def mixed(task_state_store=None, asset_state_store=None, ti=None) -> dict:
        """Try 1 writes with both APIs and fails; try 2 reads each API's keys through the other."""
        from airflow_task_state import asset_state, task_state

        airflow_asset, our_asset = asset_state_store[MIXED_ASSET], asset_state[MIXED_ASSET]
        if ti.try_number == 1:
            task_state_store.set("written_by_airflow", {"try": 1, "api": "airflow"})
            task_state.set("written_by_ours", {"try": 1, "api": "ours"})
            airflow_asset.set("airflow_watermark", 100)
            our_asset.set("our_watermark", 200)
            task_state.increment("tries")
            raise RuntimeError("try 1 fails on purpose: try 2 reads what it wrote")
        task_state.increment("tries")
        # Expired keys are never returned, whichever API asks (Airflow's own backend returns them).
        task_state_store.set("short_lived", "gone soon", retention=timedelta(seconds=1))
        time.sleep(1.5)
        return {
            "expired": {
                "airflow": task_state_store.get("short_lived"),
                "ours": task_state.get("short_lived"),
            },
            "ours_read": {
                "task": task_state.get("written_by_airflow"),
                "asset": our_asset.get("airflow_watermark"),
            },
            "airflow_read": {
                "task": task_state_store.get("written_by_ours"),
                "asset": airflow_asset.get("our_watermark"),
                "counter": task_state_store.get("tries"),
            },
        }

    mixed()


af33_mixed()


def _job(task_state_store, ti, *, fail_first_try: bool) -> dict:
    """
    What a clear leaves: Airflow's accessor is the try's first touch of state (no call of ours comes
    first), then ours; each stores this try's job id.
    """
    from airflow_task_state import task_state

    found = {"airflow": task_state_store.get("job_id"), "ours": task_state.get("our_job_id")}
    task_state_store.set("job_id", f"job-of-try-{ti.try_number}")
    task_state.set("our_job_id", f"job-of-try-{ti.try_number}")
    if fail_first_try and ti.try_number == 1:
        raise RuntimeError("try 1 fails with no retry left: a clear runs it again")
    return {"try": ti.try_number, "found": found}


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def af33_clear_after_success():
    @task
    def job(task_state_store=None, ti=None) -> dict:
        return _job(task_state_store, ti, fail_first_try=False)

    job()


af33_clear_after_success()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def af33_clear_after_failure():
    @task(retries=0)
    def job(task_state_store=None, ti=None) -> dict:
        return _job(task_state_store, ti, fail_first_try=True)

    job()


af33_clear_after_failure()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def af33_clear_keep_always():
    """A task written for Airflow 3.3's accessor alone, which keeps its state on every clear (ours)."""

    @task
    def job(task_state_store=None, ti=None) -> dict:
        found = task_state_store.get("job_id")
        task_state_store.set("job_id", f"job-of-try-{ti.try_number}")
        return {"try": ti.try_number, "found": found}

    job().operator.keep_task_state = "always"


af33_clear_keep_always()


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def af33_identity():
    """``intruder`` attacks the state of ``victim``, which runs beside it in the same dag run."""

    @task
    def victim(ti=None) -> None:
        from airflow_task_state import task_state

        task_state.set("secret", {"owner": "victim"})
        (_shared() / "af33-victim.json").write_text(json.dumps({"ti_id": str(ti.id)}))
        deadline = time.monotonic() + 120
        while not (_shared() / "af33-intruder-done").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if task_state.get("secret") != {"owner": "victim"} or task_state.keys() != ["secret"]:
            raise RuntimeError(f"the victim's state changed: {task_state.keys()}")

    @task
    def intruder(ti=None) -> dict:
        import httpx
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import (
            ErrorResponse,
            GetTaskStateStore,
            SetRenderedFields,
            SetTaskStateStore,
        )
        from airflow_task_state import config, task_state
        from airflow_task_state.protocol import PROOF_FIELD, proof
        from airflow_task_state.worker import client as state_client

        try:
            victim_file = _shared() / "af33-victim.json"
            deadline = time.monotonic() + 120
            while not victim_file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            victim_id = json.loads(victim_file.read_text())["ti_id"]
            task_state.set("mine", 1)  # its own handshake: the client now holds its own credential
            [own] = [c.token for (_, ti_id), c in state_client._credentials.items() if ti_id == str(ti.id)]
            api, headers = config.api_url(), {"Authorization": f"Bearer {own}"}
            value = f"{api}/task-instances/{victim_id}/value"
            report: dict = {}

            def answer(response: httpx.Response) -> list:
                try:
                    return [response.status_code, response.json()["detail"]["reason"]]
                except (ValueError, KeyError, TypeError):
                    return [response.status_code, response.text[:200]]

            with httpx.Client(timeout=30) as http:
                report["read"] = answer(http.get(value, params={"key": "secret"}, headers=headers))
                written = http.put(value, params={"key": "secret"}, json={"value": "owned"}, headers=headers)
                report["write"] = answer(written)
                # A proof for the victim, written where the task can write: its own rendered fields.
                verifier = "v" * 43
                task_runner.SUPERVISOR_COMMS.send(
                    SetRenderedFields(rendered_fields={PROOF_FIELD: proof(victim_id, verifier)})
                )
                redeemed = http.post(
                    f"{api}/credentials", json={"task_instance_id": victim_id, "verifier": verifier}
                )
                report["victim's proof in own fields"] = answer(redeemed)
            # Airflow 3.3's own accessors' messages, aimed at the victim: its supervisor sends them with
            # the try's Airflow token, which the Execution API checks against the task instance.
            for name, message in (
                ("airflow read", GetTaskStateStore(ti_id=victim_id, key="secret")),
                (
                    "airflow write",
                    SetTaskStateStore(ti_id=victim_id, key="secret", value="owned", expires_at=None),
                ),
            ):
                try:
                    response = task_runner.SUPERVISOR_COMMS.send(message)
                    refused = isinstance(response, ErrorResponse)
                    report[name] = ["refused" if refused else "allowed", repr(response)[:300]]
                except Exception as error:  # the supervisor may raise the Execution API's refusal
                    report[name] = ["refused", f"{type(error).__name__}: {error}"[:300]]
            return report
        finally:
            (_shared() / "af33-intruder-done").write_text("")

    victim()
    intruder()


af33_identity()
