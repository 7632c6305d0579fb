"""
The isolation test's DAGs: a victim that keeps task and asset state while it runs, and a hostile
task (in another DAG) that uses everything it can reach on its worker, but the Celery broker (see
celery_broker_dags.py), to read or change that state. The hostile task records every attempt and
its answer; it never asserts, the test does.

Both read ``ISOLATION_DIR`` (shared with the test) from the environment; the hostile task gets the
victim's ids from its run's conf (task instance ids are not secrets: nothing may rest on them).
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, dag, get_current_context, task

VICTIM_ASSET = Asset(name="isolation_victim", uri="file:///tmp/isolation/victim")
OTHER_ASSET = Asset(name="isolation_other", uri="file:///tmp/isolation/other")


def _dir() -> Path:
    return Path(os.environ["ISOLATION_DIR"])


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def isolation_victim():
    @task(outlets=[VICTIM_ASSET, OTHER_ASSET])
    def victim() -> None:
        from airflow_task_state import asset_state, task_state

        task_state.set("secret", {"owner": "victim"})
        asset_state[VICTIM_ASSET].set("watermark", 100)
        asset_state[OTHER_ASSET].set("watermark", 200)
        (_dir() / "victim-ready").write_text("")
        # Stay running while the hostile task attacks: a running try is what could be overwritten.
        while not (_dir() / "release-victim").exists():
            time.sleep(0.2)
        if task_state.get("secret") != {"owner": "victim"} or task_state.keys() != ["secret"]:
            raise RuntimeError(f"the victim's state changed: {task_state.keys()}")

    victim()


isolation_victim()


def _unsigned(payload: dict) -> str:
    def part(document: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}."


def _airflow_token_from_memory() -> str | None:
    """The supervisor's Execution API token: the task process is a fork, its frames are still there."""
    for frame_info in inspect.stack():
        token = frame_info.frame.f_locals.get("token")
        if frame_info.function == "supervise" and isinstance(token, str):
            return token
    return None


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def isolation_hostile():
    @task(inlets=[VICTIM_ASSET], retries=1, retry_delay=timedelta(seconds=0))
    def hostile() -> None:
        import httpx
        import jwt
        from airflow.configuration import conf
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import SetRenderedFields
        from airflow_task_state import config, task_state
        from airflow_task_state.api.task_instance_checks import READ_CHECK_SECONDS
        from airflow_task_state.protocol import PROOF_FIELD, proof
        from airflow_task_state.worker import client as state_client

        context = get_current_context()
        ti = context["ti"]
        victim = context["dag_run"].conf["victim"]
        api = config.api_url()
        execution_api = conf.get("core", "execution_api_server_url").rstrip("/")
        http = httpx.Client(timeout=30)

        # Its own state, through its own handshake: the credential the client holds is its own.
        task_state.set("mine", ti.try_number)
        [own] = [c.token for (pid, ti_id), c in state_client._credentials.items() if ti_id == str(ti.id)]
        if ti.try_number == 1:
            # Kept for the next try, and for after the task has ended.
            kept = {"credential": own, "ti_id": str(ti.id), "last_checked": time.time()}
            (_dir() / "try-1.json").write_text(json.dumps(kept))
            raise RuntimeError("try 1 fails on purpose: try 2 replays its credential")
        (_dir() / "try-2.json").write_text(json.dumps({"credential": own, "ti_id": str(ti.id)}))

        attempts: list[dict] = []

        def attempt(name: str, response: httpx.Response) -> None:
            try:
                reason = response.json().get("detail")
            except ValueError:
                reason = response.text[:200]
            attempts.append({"name": name, "status": response.status_code, "detail": reason})

        def bearer(credential: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {credential}"}

        victim_value = f"{api}/task-instances/{victim['ti_id']}/value"
        victim_keys = f"{api}/task-instances/{victim['ti_id']}/keys"

        def every_victim_operation(name: str, headers: dict[str, str]) -> None:
            attempt(f"{name}: read", http.get(victim_value, params={"key": "secret"}, headers=headers))
            attempt(f"{name}: list", http.get(victim_keys, headers=headers))
            attempt(
                f"{name}: write",
                http.put(victim_value, params={"key": "secret"}, json={"value": "owned"}, headers=headers),
            )
            attempt(f"{name}: delete", http.delete(victim_value, params={"key": "secret"}, headers=headers))
            attempt(f"{name}: clear", http.delete(victim_keys, headers=headers))
            asset = {"name": VICTIM_ASSET.name, "key": "watermark"}
            attempt(
                f"{name}: write victim asset",
                http.put(f"{api}/assets/value", params=asset, json={"value": -1}, headers=headers),
            )
            other = {"name": OTHER_ASSET.name, "key": "watermark"}
            attempt(
                f"{name}: read undeclared asset",
                http.get(f"{api}/assets/value", params=other, headers=headers),
            )

        # 1. What the worker holds: no key of ours, none of Airflow's.
        found = {
            "env": sorted(
                k for k in os.environ if any(w in k for w in ("JWT", "STATE__", "SECRET", "SQL_ALCHEMY"))
            ),
            "jwt_secret": conf.get("api_auth", "jwt_secret", fallback=""),
            "jwt_private_key_path": conf.get("api_auth", "jwt_private_key_path", fallback=""),
            "session_key": conf.get("state", "session_key", fallback=""),
            "api_secret": conf.get("state", "api_secret", fallback=""),
        }

        # 2. No credential, and credentials forged with whatever key it could guess or find.
        every_victim_operation("no credential", {})
        claims = {
            "ti_id": victim["ti_id"],
            "sub": victim["ti_id"],
            "dag_id": victim["dag_id"],
            "run_id": victim["run_id"],
            "task_id": victim["task_id"],
            "map_index": -1,
            "try_number": 1,
            "aud": "airflow-task-state",
            "iat": int(time.time()),
            "exp": int(time.time()) + 600,
        }
        guesses = [
            "secret",
            "airflow",
            "changeme" * 4,
            *(v for v in found.values() if isinstance(v, str) and v),
        ]
        for i, guess in enumerate(guesses):
            every_victim_operation(
                f"forged with guess {i}", bearer(jwt.encode(claims, guess, algorithm="HS256"))
            )
        every_victim_operation("unsigned (alg none)", bearer(_unsigned(claims)))

        # 3. Its own, valid credential, aimed at the victim.
        every_victim_operation("own credential", bearer(own))

        # 4. A proof for the victim, written where it can write: its own rendered fields.
        verifier = "h" * 43
        task_runner.SUPERVISOR_COMMS.send(
            SetRenderedFields(rendered_fields={PROOF_FIELD: proof(victim["ti_id"], verifier)})
        )
        redeemed = http.post(
            f"{api}/credentials", json={"task_instance_id": victim["ti_id"], "verifier": verifier}
        )
        attempt("victim's proof written in own fields", redeemed)

        # 5. Its supervisor's Airflow token, read from the forked frames.
        token = _airflow_token_from_memory()
        found["airflow_token"] = token is not None
        if token is not None:
            every_victim_operation("own Airflow token as credential", bearer(token))
            fields = {PROOF_FIELD: proof(victim["ti_id"], verifier)}
            attempt(
                "Airflow token: write the victim's rendered fields",
                http.put(
                    f"{execution_api}/task-instances/{victim['ti_id']}/rtif",
                    json=fields,
                    headers=bearer(token),
                ),
            )
            own_fields = http.put(
                f"{execution_api}/task-instances/{ti.id}/rtif", json=fields, headers=bearer(token)
            )
            found["airflow_token_wrote_own_fields"] = own_fields.status_code
            attempt(
                "victim's proof after the Airflow token's writes",
                http.post(
                    f"{api}/credentials", json={"task_instance_id": victim["ti_id"], "verifier": verifier}
                ),
            )

        # 6. The credential of its earlier try.
        earlier = json.loads((_dir() / "try-1.json").read_text())
        # A read trusts a check of its task instance made in the last READ_CHECK_SECONDS (by design:
        # a try reads the state its task instance shares with every try). Past that window, which
        # began with try 1's last write, try 1's credential must be refused like any other.
        time.sleep(max(0.0, earlier["last_checked"] + READ_CHECK_SECONDS + 0.5 - time.time()))
        every_victim_operation("try 1's credential", bearer(earlier["credential"]))
        for operation, response in [
            (
                "read",
                http.get(
                    f"{api}/task-instances/{earlier['ti_id']}/keys", headers=bearer(earlier["credential"])
                ),
            ),
            (
                "read as try 2",
                http.get(f"{api}/task-instances/{ti.id}/keys", headers=bearer(earlier["credential"])),
            ),
            (
                "write",
                http.put(
                    f"{api}/task-instances/{earlier['ti_id']}/value",
                    params={"key": "mine"},
                    json={"value": "replayed"},
                    headers=bearer(earlier["credential"]),
                ),
            ),
            ("renew", http.post(f"{api}/credentials/renew", headers=bearer(earlier["credential"]))),
        ]:
            attempt(f"try 1's credential on its own task instance: {operation}", response)

        (_dir() / "hostile.json").write_text(json.dumps({"found": found, "attempts": attempts}))

    hostile()


isolation_hostile()
