"""
The handshake's server side, against real task instances: a credential is issued only when the
proof is among the task instance's rendered fields, written there as the Execution API writes them
(``TaskInstance.update_rtif``). The real supervisor writing it is in
tests/celery_worker/test_e2e_isolation.py.
"""

from __future__ import annotations

import json
import time
from uuid import UUID

import jwt
import pytest
from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential
from airflow_task_state.api.signing_keys import forget_configured_keys, signing_key
from airflow_task_state.protocol import PROOF_FIELD, proof
from sqlalchemy import select, text
from test_state_api import api, at, detail, exercise_ti, running, session_key, set_ti_state

__all__ = ["api", "exercise_ti", "running", "session_key"]  # fixtures, used by name

VERIFIER = "v" * 43


def put_rendered_fields(ti_id: str, fields: dict) -> None:
    """What the Execution API's PUT /task-instances/{id}/rtif does for the supervisor of that try."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalar(select(TaskInstance).where(TaskInstance.id == UUID(ti_id)))
        ti.update_rtif(fields, session=session)


def other_task_instance_id(claims: TaskInstanceClaims) -> str:
    """The task instance of the other task of the same dag run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return str(
            session.scalar(
                select(TaskInstance.id).where(
                    TaskInstance.dag_id == claims.dag_id,
                    TaskInstance.run_id == claims.run_id,
                    TaskInstance.task_id != claims.task_id,
                )
            )
        )


def redeem(api, ti_id: str, verifier: str = VERIFIER):
    return api.post("/credentials", json={"task_instance_id": ti_id, "verifier": verifier})


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def test_a_proof_gives_a_credential_for_that_task_instance_and_try(api, running):
    put_rendered_fields(running.ti_id, {"bash_command": "echo", PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    granted = redeem(api, running.ti_id)
    assert granted.status_code == 200, granted.text
    assert granted.json()["expires_in"] == 600
    credential = granted.json()["credential"]
    claims = jwt.decode(credential, options={"verify_signature": False})
    assert (claims["sub"], claims["dag_id"], claims["task_id"], claims["try_number"]) == (
        running.ti_id,
        running.dag_id,
        running.task_id,
        running.try_number,
    )
    written = api.put(**at(running, "via_handshake"), json={"value": 1}, headers=bearer(credential))
    assert written.status_code == 200 and written.json() == {"key": "via_handshake", "version": 1}
    assert api.get(**at(running, "via_handshake"), headers=bearer(credential)).json()["value"] == 1
    # One proof serves every process of the try: each redeems it with the verifier they share.
    assert redeem(api, running.ti_id).status_code == 200


def test_without_the_proof_a_verifier_is_worth_nothing(api, running):
    put_rendered_fields(running.ti_id, {"bash_command": "echo"})
    missing = redeem(api, running.ti_id)
    assert missing.status_code == 403 and detail(missing)["reason"] == "proof_not_found"
    assert "only the supervisor" in detail(missing)["message"]

    # Who reads the rendered fields (the UI shows them) sees the proof, never the verifier.
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    for guess in (proof(running.ti_id, VERIFIER), "w" * 43, VERIFIER + "x"):
        refused = redeem(api, running.ti_id, guess)
        assert refused.status_code == 403 and detail(refused)["reason"] == "proof_not_found"


def test_a_proof_in_another_task_instances_fields_proves_nothing(api, running):
    """A task proves a verifier for its victim's id where it can write: its own rendered fields."""
    attacker = other_task_instance_id(running)
    attacking = TaskInstanceClaims(attacker, "", "", "", -1, 0)
    set_ti_state(attacking, "running")
    put_rendered_fields(running.ti_id, {"bash_command": "echo"})
    put_rendered_fields(attacker, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    refused = redeem(api, running.ti_id)
    assert refused.status_code == 403 and detail(refused)["reason"] == "proof_not_found"
    # The proof of another task instance's id in its own fields does not prove its own either.
    assert redeem(api, attacker).status_code == 403
    # And its own proof, in its own fields, names its own task instance only.
    put_rendered_fields(attacker, {PROOF_FIELD: proof(attacker, VERIFIER)})
    attackers_credential = redeem(api, attacker).json()["credential"]
    assert jwt.decode(attackers_credential, options={"verify_signature": False})["sub"] == attacker
    on_the_victim = api.get(**at(running), headers=bearer(attackers_credential))
    assert on_the_victim.status_code == 403 and detail(on_the_victim)["reason"] == "forbidden"
    set_ti_state(attacking, "success")


#: Rendered fields only a direct write to the database leaves (Airflow's Execution API stores a JSON
#: object), each as its text; "proof_in_a_string": the proof's object written as a JSON string.
NOT_AN_OBJECT = {
    "not_json": "{not json",
    "array": "[1, 2]",
    "string": '"text"',
    "null": "null",
    "number": "7",
    "nested_too_deep_array": "[" * 3000 + "]" * 3000,
    "nested_too_deep_object": '{"a":' * 3000 + "1" + "}" * 3000,
    "proof_in_a_string": "",
}


@pytest.mark.parametrize("stored", list(NOT_AN_OBJECT))
def test_rendered_fields_that_are_not_a_json_object_prove_nothing_and_break_nothing(
    api, running, db_kind, stored
):
    """
    The exchange refuses (403 ``proof_not_found``), saying why, instead of failing (500), on every
    database: the column is read as text and decoded once, whatever the driver (psycopg2 decodes a
    JSON column itself, so a JSON string holding the proof's object was decoded twice and accepted),
    and JSON nested deeper than Python decodes is no proof. A database that refuses the text in
    a JSON column cannot hold it (PostgreSQL and MariaDB check JSON, MariaDB its depth too).
    """
    from airflow.utils.session import create_session
    from sqlalchemy.exc import DBAPIError

    fields = {PROOF_FIELD: proof(running.ti_id, VERIFIER)}
    raw = NOT_AN_OBJECT[stored] or json.dumps(json.dumps(fields))
    put_rendered_fields(running.ti_id, fields)
    rewrite = text("UPDATE rendered_task_instance_fields SET rendered_fields = :raw WHERE run_id = :run")
    try:
        with create_session() as session:
            session.execute(rewrite, {"raw": raw, "run": running.run_id})
    except DBAPIError:
        pytest.skip(f"{db_kind} refuses {stored} in a JSON column")
    try:
        refused = redeem(api, running.ti_id)
        assert refused.status_code == 403 and detail(refused)["reason"] == "proof_not_found", refused.text
        first_request = api.get(**at(running, "k"), headers=proving(running.ti_id))
        assert first_request.status_code == 403 and detail(first_request)["reason"] == "proof_not_found"
    finally:  # Airflow's own writes of rendered fields read the row first, and would fail on it
        with create_session() as session:
            session.execute(rewrite, {"raw": "{}", "run": running.run_id})


@pytest.mark.parametrize("state", ["success", "failed", "up_for_retry", "queued", "deferred", "restarting"])
def test_a_try_that_is_not_running_gets_no_credential(api, running, state):
    """
    A process left behind by a try that ended, with its verifier and its proof still in the
    rendered fields, gets nothing new: only a running try may obtain a credential. What it already
    holds keeps its documented lifetime (reads only).
    """
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    held = redeem(api, running.ti_id).json()["credential"]
    set_ti_state(running, state)
    refused = redeem(api, running.ti_id)
    assert refused.status_code == 403 and detail(refused)["reason"] == "not_running"
    assert f"is {state}" in detail(refused)["message"]
    assert api.get(**at(running), headers=bearer(held)).status_code in (200, 404)
    written = api.put(**at(running), json={"value": 1}, headers=bearer(held))
    assert written.status_code == 403 and detail(written)["reason"] == "not_running"


def proving(ti_id: str, verifier: str = VERIFIER) -> dict[str, str]:
    return {"Authorization": f"StateProof {ti_id}.{verifier}"}


def test_a_first_request_carrying_the_proof_is_answered_with_a_credential(api, running):
    """The handshake folded into a task process's first state request: no round trip of its own."""
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    written = api.put(**at(running, "first"), json={"value": 1}, headers=proving(running.ti_id))
    assert written.status_code == 200, written.text
    credential = written.headers["X-Airflow-State-Credential"]
    assert written.headers["X-Airflow-State-Credential-Expires-In"] == "600"
    assert jwt.decode(credential, options={"verify_signature": False})["sub"] == running.ti_id
    # Whatever the route answers: a missing key's 404 brings it too.
    missing = api.get(**at(running, "absent"), headers=proving(running.ti_id))
    assert missing.status_code == 404 and "X-Airflow-State-Credential" in missing.headers
    assert api.get(**at(running, "first"), headers=bearer(credential)).json()["value"] == 1
    # A request with a credential gets none back.
    assert (
        "X-Airflow-State-Credential"
        not in api.get(**at(running, "first"), headers=bearer(credential)).headers
    )


@pytest.mark.parametrize(
    "presented, status, reason",
    [
        ("{ti}.{verifier}x", 403, "proof_not_found"),
        ("{ti}.short", 401, "invalid_token"),
        ("not-a-uuid.{verifier}", 401, "invalid_token"),
        ("{ti}", 401, "invalid_token"),
        ("{other}.{verifier}", 403, "forbidden"),
    ],
    ids=["wrong-verifier", "short-verifier", "not-a-uuid", "no-verifier", "no-such-task-instance"],
)
def test_a_first_request_with_a_bad_proof_is_refused_and_changes_nothing(
    api, running, presented, status, reason
):
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    header = {
        "Authorization": "StateProof "
        + presented.format(ti=running.ti_id, verifier=VERIFIER, other="01234567-89ab-7def-8123-456789abcdef")
    }
    refused = api.put(**at(running, "refused"), json={"value": 1}, headers=header)
    assert refused.status_code == status and detail(refused)["reason"] == reason
    assert "X-Airflow-State-Credential" not in refused.headers
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    assert redeem(api, running.ti_id).status_code == 200
    credential = redeem(api, running.ti_id).json()["credential"]
    assert api.get(**at(running, "refused"), headers=bearer(credential)).status_code == 404


def test_a_first_request_of_a_try_that_is_not_running_is_refused(api, running):
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    set_ti_state(running, "success")
    refused = api.get(**at(running), headers=proving(running.ti_id))
    assert refused.status_code == 403 and detail(refused)["reason"] == "not_running"
    assert "X-Airflow-State-Credential" not in refused.headers


def test_a_task_instance_that_is_gone_gets_no_credential(api, running):
    """A try's id names that try only: once a newer try started, the old id is gone from the table."""
    gone = "01234567-89ab-7def-8123-456789abcdef"
    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(gone, VERIFIER)})
    refused = redeem(api, gone)
    assert refused.status_code == 403 and "does not exist" in detail(refused)["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"task_instance_id": "01234567-89ab-7def-8123-456789abcdef", "verifier": "short"},
        {"task_instance_id": "01234567-89ab-7def-8123-456789abcdef", "verifier": "v" * 257},
        {"task_instance_id": "not-a-uuid", "verifier": VERIFIER},
        {"verifier": VERIFIER},
        {"task": 1},
    ],
    ids=["short-verifier", "long-verifier", "not-a-uuid", "no-task-instance", "no-fields"],
)
def test_malformed_handshake_bodies_are_422(api, body):
    refused = api.post("/credentials", json=body)
    assert refused.status_code == 422 and detail(refused)["reason"] == "invalid_request"


def test_a_task_process_of_an_earlier_release_is_told_to_upgrade(api, running):
    """Workers of 0.4 asked for a challenge first: they fail with a message that says what to do."""
    answer = api.post("/challenges", json={"task_instance_id": running.ti_id})
    assert answer.status_code == 410 and detail(answer)["reason"] == "invalid_request"
    assert "same version of airflow-task-state on the workers" in detail(answer)["message"]


def test_a_running_try_renews_its_credential_an_ended_one_cannot(api, running):
    credential = issue_credential(running, signing_key(), now=time.time() - 400)
    renewed = api.post("/credentials/renew", headers=bearer(credential))
    assert renewed.status_code == 200
    fresh = renewed.json()["credential"]
    assert jwt.decode(fresh, options={"verify_signature": False})["iat"] > time.time() - 60
    assert api.get(**at(running), headers=bearer(fresh)).status_code in (200, 404)
    set_ti_state(running, "success")
    ended = api.post("/credentials/renew", headers=bearer(fresh))
    assert ended.status_code == 403 and detail(ended)["reason"] == "not_running"
    assert api.post("/credentials/renew", json={}).status_code == 401


def test_rotating_the_key_keeps_credentials_of_the_previous_one_for_their_lifetime(api, running, monkeypatch):
    old_key, new_key = "old-session-key-" + "o" * 40, "new-session-key-" + "n" * 40
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", old_key)
    forget_configured_keys()
    old_credential = issue_credential(running, signing_key())
    old_signing = signing_key()

    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", new_key)
    monkeypatch.setenv("AIRFLOW__STATE__PREVIOUS_SESSION_KEY", old_key)
    forget_configured_keys()
    assert signing_key() != old_signing
    assert api.get(**at(running), headers=bearer(old_credential)).status_code in (200, 404)
    renewed = api.post("/credentials/renew", headers=bearer(old_credential)).json()["credential"]
    jwt.decode(renewed, signing_key(), algorithms=["HS256"], audience="airflow-task-state")  # the new key

    monkeypatch.setenv("AIRFLOW__STATE__PREVIOUS_SESSION_KEY", "")
    forget_configured_keys()
    assert api.get(**at(running), headers=bearer(old_credential)).status_code == 401
    assert api.get(**at(running), headers=bearer(renewed)).status_code in (200, 404)


def test_the_key_derives_from_airflows_jwt_secret_or_private_key_without_any_setting(
    api, running, monkeypatch, tmp_path
):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "jwt-secret-" + "j" * 60)
    forget_configured_keys()
    from_secret = signing_key()

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "jwt.pem").write_bytes(pem)
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_PRIVATE_KEY_PATH", str(tmp_path / "jwt.pem"))
    forget_configured_keys()
    from_private_key = signing_key()
    assert len({from_secret, from_private_key, pem}) == 3
    # Both set (Edge workers hold jwt_secret to sign their own requests): the private key wins.
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "jwt-secret-" + "j" * 60)
    forget_configured_keys()
    assert signing_key() == from_private_key

    put_rendered_fields(running.ti_id, {PROOF_FIELD: proof(running.ti_id, VERIFIER)})
    assert redeem(api, running.ti_id).status_code == 200

    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "too-short")
    forget_configured_keys()
    short = redeem(api, running.ti_id)
    assert short.status_code == 503 and "at least 32 characters" in detail(short)["message"]
    forget_configured_keys()


# --- the task's client: one handshake per process, renewal, a new handshake after a key change ---


@pytest.fixture
def task_client(api, running, monkeypatch):
    """
    The task's real client, talking to the app; its supervisor's part (storing the proof among the
    rendered fields) done as the Execution API does it. Returns a client factory and the paths
    requested, in order.
    """
    from types import SimpleNamespace

    from airflow_task_state.worker import client, handshake

    requested: list[str] = []
    send = api.send

    def recording(request, *args, **kwargs):
        proving = request.headers.get("Authorization", "").startswith("StateProof ")
        requested.append(f"{request.method} {request.url.path}" + (" with proof" if proving else ""))
        return send(request, *args, **kwargs)

    def through_the_execution_api(ti, fields):
        requested.append("SetRenderedFields")
        put_rendered_fields(str(ti.id), fields)

    monkeypatch.setattr(api, "send", recording)
    monkeypatch.setattr(client, "_sync_client", lambda base_url, in_process: api)
    monkeypatch.setattr(handshake, "_send", through_the_execution_api)
    monkeypatch.setattr(handshake, "_rendered_fields", lambda ti: {"bash_command": "echo"})
    monkeypatch.setattr(handshake, "_proofs", {})
    monkeypatch.setattr(client, "_credentials", {})
    monkeypatch.setenv("AIRFLOW__STATE__API_URL", "http://testserver")
    ti = SimpleNamespace(id=running.ti_id)
    return lambda: client.StateClient(ti), requested


def test_concurrent_first_calls_of_a_process_share_one_handshake(task_client, running):
    from concurrent.futures import ThreadPoolExecutor

    new_client, requested = task_client
    keys = f"/task-instances/{running.ti_id}/keys"
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: new_client().request("GET", keys).status_code, range(16)))
    assert answers == [200] * 16
    # The first request carried the proof and brought the credential back: no request of its own.
    assert requested.count("SetRenderedFields") == requested.count(f"GET {keys} with proof") == 1
    assert requested.count(f"GET {keys}") == 15 and "POST /credentials" not in requested


def test_a_first_call_that_finds_no_key_still_brings_the_credential(task_client, running):
    """A resumable task's first call reads a job id it has not stored yet: 404, and a credential."""
    new_client, requested = task_client
    value = f"/task-instances/{running.ti_id}/value"
    assert new_client().request("GET", value, params={"key": "never-written"}).status_code == 404
    assert new_client().request("GET", value, params={"key": "never-written"}).status_code == 404
    assert requested == ["SetRenderedFields", f"GET {value} with proof", f"GET {value}"]


def test_a_running_try_renews_at_half_life_and_re_proves_after_a_key_change(
    task_client, running, monkeypatch
):
    from airflow_task_state.worker import client

    new_client, requested = task_client
    keys = f"/task-instances/{running.ti_id}/keys"
    new_client().request("GET", keys)
    [(cache_key, held)] = client._credentials.items()
    client._credentials[cache_key] = client._Credential(held.token, renew_at=0.0, expires_at=held.expires_at)
    assert new_client().request("GET", keys).status_code == 200
    assert requested.count("POST /credentials/renew") == 1 and requested.count(f"GET {keys} with proof") == 1

    # The server's key changes without a previous key: the credential is refused, the client proves again.
    monkeypatch.setenv("AIRFLOW__STATE__SESSION_KEY", "rotated-without-notice-" + "r" * 40)
    forget_configured_keys()
    assert new_client().request("GET", keys).status_code == 200
    # With the proof already there: no second write through the supervisor.
    assert requested.count(f"GET {keys} with proof") == 2 and requested.count("SetRenderedFields") == 1

    # Once the try has ended, renewal is refused: the credential it holds still reads, never writes.
    from airflow_task_state import StateAccessDeniedError

    set_ti_state(running, "success")
    [(cache_key, held)] = client._credentials.items()
    client._credentials[cache_key] = client._Credential(held.token, renew_at=0.0, expires_at=held.expires_at)
    assert new_client().request("GET", keys).status_code == 200
    with pytest.raises(StateAccessDeniedError, match="not_running"):
        new_client().request(
            "PUT", f"/task-instances/{running.ti_id}/value", params={"key": "k"}, json={"value": 1}
        )


def test_a_proof_replaced_since_it_was_written_is_written_again(task_client, running):
    """The task runner rewrites the rendered fields after some tasks (overwrite_rtif_after_execution)."""
    from airflow_task_state.worker import client

    new_client, requested = task_client
    keys = f"/task-instances/{running.ti_id}/keys"
    assert new_client().request("GET", keys).status_code == 200
    put_rendered_fields(running.ti_id, {"bash_command": "echo"})
    client._credentials.clear()
    assert new_client().request("GET", keys).status_code == 200
    assert requested.count("SetRenderedFields") == 2 and requested.count(f"GET {keys} with proof") == 3


def test_an_increment_refused_for_its_proof_is_applied_once_after_the_proof_is_written_again(
    task_client, running
):
    """Refused at the door (403 proof_not_found), the request did nothing: sent again, it counts once."""
    from airflow_task_state.worker import client, handshake

    new_client, requested = task_client
    keys = f"/task-instances/{running.ti_id}/keys"
    assert new_client().request("GET", keys).status_code == 200
    put_rendered_fields(running.ti_id, {"bash_command": "echo"})
    client._credentials.clear()
    increment = f"/task-instances/{running.ti_id}/increment"
    answer = new_client().request(
        "POST", increment, params={"key": "counted"}, json={"by": 5}, idempotent=False
    )
    assert answer.json()["value"] == 5
    assert requested.count(f"POST {increment} with proof") == 2 and handshake._proofs


@pytest.fixture
def task_runner_write(task_client, monkeypatch):
    """
    What the task runner does as the try starts, with the proof riding along: it writes the task's
    rendered fields (stored as the Execution API stores them), then calls the listeners' running
    hook. Returns the try's task instance.
    """
    from airflow.sdk import BaseOperator
    from airflow.sdk.execution_time import task_runner
    from airflow_task_state.worker import handshake, task_runner_shim

    class Templated(BaseOperator):
        template_fields = ("bash_command",)

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.bash_command = "echo"

    monkeypatch.setattr(task_runner, "_serialize_rendered_fields", task_runner._serialize_rendered_fields)
    monkeypatch.setattr(task_runner_shim, "_airflows_own", None)
    handshake.ride_along()  # as the listener does when the task process starts
    new_client, _ = task_client
    ti = new_client().ti
    ti.task = Templated(task_id="templated")
    with task_runner.set_current_context({"ti": ti}):
        written = task_runner._serialize_rendered_fields(ti.task)
    put_rendered_fields(ti.id, written)
    handshake.prepare(ti)
    return ti


def stored_rendered_fields(ti_id: str) -> dict:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalar(select(TaskInstance).where(TaskInstance.id == UUID(ti_id)))
        return RTIF.get_templated_fields(ti, session=session)


def test_a_proof_riding_on_the_task_runners_write_needs_no_write_of_its_own(
    task_client, task_runner_write, running
):
    """The first state call writes nothing through the supervisor; the try's end withdraws the proof."""
    from airflow_task_state.keep_choice import KEEP_FIELD
    from airflow_task_state.worker import handshake

    new_client, requested = task_client
    fields = stored_rendered_fields(running.ti_id)
    assert fields["bash_command"] == "echo" and KEEP_FIELD in fields and fields[PROOF_FIELD]
    value = f"/task-instances/{running.ti_id}/value"
    assert new_client().request("GET", value, params={"key": "absent"}).status_code == 404
    assert new_client().request("GET", value, params={"key": "absent"}).status_code == 404
    assert requested == [f"GET {value} with proof", f"GET {value}"]

    # Its verifier went to the API server: the proof goes as the try ends.
    handshake.withdraw(task_runner_write)
    assert requested[-1] == "SetRenderedFields"
    assert PROOF_FIELD not in stored_rendered_fields(running.ti_id)


def test_a_task_without_template_fields_has_the_proof_ride_if_its_dag_imported_the_accessors(
    task_client, running, monkeypatch
):
    """
    The task runner writes no rendered fields for such a task (a classic operator built on the
    resumable mixins): if the accessors are imported as the try starts, the proof goes alone on that
    write, before the task's code, and the first call writes nothing of its own; if not, no write.
    """
    import sys

    from airflow.sdk import BaseOperator
    from airflow.sdk.execution_time import task_runner
    from airflow_task_state.worker import accessors, handshake, task_runner_shim

    monkeypatch.setattr(task_runner, "_serialize_rendered_fields", task_runner._serialize_rendered_fields)
    monkeypatch.setattr(task_runner_shim, "_airflows_own", None)
    handshake.ride_along()
    new_client, requested = task_client
    ti = new_client().ti
    ti.task = BaseOperator(task_id="plain")
    with task_runner.set_current_context({"ti": ti}):
        monkeypatch.delitem(sys.modules, handshake.ACCESSORS_MODULE)
        assert task_runner._serialize_rendered_fields(ti.task) == {}  # the DAG never imported them
        monkeypatch.setitem(sys.modules, handshake.ACCESSORS_MODULE, accessors)
        written = task_runner._serialize_rendered_fields(ti.task)
    assert written[PROOF_FIELD]
    put_rendered_fields(ti.id, written)
    handshake.prepare(ti)
    value = f"/task-instances/{running.ti_id}/value"
    assert new_client().request("GET", value, params={"key": "absent"}).status_code == 404
    assert requested == [f"GET {value} with proof"]


def test_a_try_that_never_touches_state_writes_nothing_for_the_handshake(
    task_client, task_runner_write, running, api
):
    """Its proof, whose verifier never left the try's processes, stays: worth nothing to anyone."""
    from airflow_task_state.worker import handshake

    _, requested = task_client
    handshake.withdraw(task_runner_write)
    assert requested == []
    # Only the verifier redeems it, and only while the try runs.
    assert redeem(api, running.ti_id).status_code == 403
    set_ti_state(running, "success")
    assert redeem(api, running.ti_id, handshake._proofs[running.ti_id].verifier).status_code == 403
