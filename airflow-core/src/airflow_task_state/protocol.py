"""
What the task-side client and the state API agree on: where each operation lives, and the
machine-readable reasons that errors carry.

Both sides import this module, so it imports neither FastAPI nor httpx.

State keys never travel in a URL path. Clients and servers normalise paths (httpx drops ``.`` and
``..`` segments and trailing slashes, uvicorn replaces invalid UTF-8, Starlette's path convertor
does not match a newline), so a key such as ``"."`` once turned ``DELETE .../keys/.`` into
``DELETE .../keys``: clear every key. A key travels as the ``key`` query parameter instead, and an
operation on one key has a path of its own (``.../value``), distinct from the operations on the
whole namespace (``.../keys``): no key can ever select another operation.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

URL_PREFIX = "/state"

# A namespace's operations live below its prefix: one task instance's, or one asset's that the task
# declares (named by the `name` and/or `uri` query parameters).
TASK_PREFIX = "/task-instances/{task_instance_id}"
ASSET_PREFIX = "/assets"
# All its keys: list them (GET) or clear them (DELETE).
KEYS = "/keys"
# One key, named by the `key` query parameter: GET, PUT or DELETE.
VALUE = "/value"
# Add to the integer stored under `key` in one atomic step (POST).
INCREMENT = "/increment"
# Many keys in one request; the keys travel in the JSON body: read them (POST .../values/read),
# write them (PUT .../values), delete them (POST .../values/delete).
VALUES = "/values"
VALUES_READ = VALUES + "/read"
VALUES_DELETE = VALUES + "/delete"
TASK_VALUE_PATH = TASK_PREFIX + VALUE
TASK_VALUES_PATH = TASK_PREFIX + VALUES
# Told by the task process once its try succeeded (POST): clears the task instance's state when
# [state] clear_on_success or the task asks for it (see airflow_task_state.worker.listener).
TASK_SUCCEEDED_PATH = "/task-instances/{task_instance_id}/succeeded"
# Told by the task process once its try succeeded (POST): applies every write the try staged (task
# and asset state) in one atomic step, once per try (see airflow_task_state.worker.staging).
TASK_STAGED_COMMIT_PATH = "/task-instances/{task_instance_id}/staged/commit"

# Query parameter of a conditional write: store only if the key is at this version (0: absent).
IF_VERSION_PARAMETER = "if_version"
# Body field of a write: the key's time to live, in seconds, or NEVER_EXPIRES; absent: the default.
TTL_FIELD = "ttl"
NEVER_EXPIRES = "never"

KEY_PARAMETER = "key"

# Set (true) in the body of a 503 ``database_unavailable`` when the server lost its database
# connection after sending the write: the write may have been applied. A client that retries the
# request then reports an unknown outcome if no later attempt is answered.
OUTCOME_UNKNOWN_FIELD = "outcome_unknown"

# The handshake that gives a task process its credential (see airflow_task_state.worker.handshake): the
# task's supervisor writes the proof among the rendered fields, then the task redeems it (POST);
# a running try renews its credential before it expires (POST, with the credential).
CREDENTIALS_PATH = "/credentials"
CREDENTIAL_RENEWAL_PATH = "/credentials/renew"
# The first request of a task process may carry the try's proof instead of a credential
# (``Authorization: StateProof <task instance id>.<verifier>``): its answer then brings the
# credential in these headers, so the handshake costs no request of its own.
PROOF_SCHEME = "StateProof"
CREDENTIAL_HEADER = "X-Airflow-State-Credential"
CREDENTIAL_EXPIRES_HEADER = "X-Airflow-State-Credential-Expires-In"
# Where clients of 0.4 and earlier asked for a challenge first: now answers 410, saying to upgrade.
RETIRED_CHALLENGES_PATH = "/challenges"

# The rendered template field that carries the proof while the try runs. Its name holds none of the
# words (token, secret, key...) that make Airflow mask a field's value.
PROOF_FIELD = "airflow_task_state_proof"


def proof(task_instance_id: str, verifier: str) -> str:
    """
    What the task's supervisor writes for it: a digest of the task instance id (so a try's id, as
    every try has its own) and of a verifier only that try's processes know, so that anyone who
    reads the rendered fields (the UI shows them) learns nothing they could redeem.
    """
    return hashlib.sha256(f"airflow-task-state proof\n{task_instance_id}\n{verifier}".encode()).hexdigest()


class Reason(StrEnum):
    """Why the state API refused a request: the ``reason`` beside the human ``message``."""

    KEY_NOT_FOUND = "key_not_found"
    VERSION_CONFLICT = "version_conflict"
    UNSUPPORTED = "unsupported"
    DAG_RUN_NOT_FOUND = "dag_run_not_found"
    TASK_INSTANCE_NOT_FOUND = "task_instance_not_found"
    ASSET_NOT_FOUND = "asset_not_found"
    ASSET_NOT_DECLARED = "asset_not_declared"
    INVALID_KEY = "invalid_key"
    INVALID_VALUE = "invalid_value"
    INVALID_REQUEST = "invalid_request"
    BODY_TOO_LARGE = "body_too_large"
    INVALID_TOKEN = "invalid_token"
    UNAUTHENTICATED = "unauthenticated"
    PROOF_NOT_FOUND = "proof_not_found"
    FORBIDDEN = "forbidden"
    NOT_RUNNING = "not_running"
    DATABASE_UNAVAILABLE = "database_unavailable"
    MISCONFIGURED = "misconfigured"
