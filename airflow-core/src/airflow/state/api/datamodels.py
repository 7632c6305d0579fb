"""Request and response bodies of the state API."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field, JsonValue

# The request bodies, for the OpenAPI schema of both surfaces. Routes read them themselves (see
# airflow.state.api.params), after the caller is authenticated and within the size limit.
_TTL_SCHEMA: dict[str, Any] = {
    "description": "How long the key lives after this write: a positive number of seconds, or "
    '`"never"`. Absent: the default (task state: `[state] default_task_retention`; asset state: never)',
    "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string", "enum": ["never"]}],
}


def _body(title: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema = {"type": "object", "title": title, "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    return {"requestBody": {"required": bool(required), "content": {"application/json": {"schema": schema}}}}


WRITE_BODY = _body(
    "StateValueBody",
    {
        "value": {
            "description": "Any JSON document except null, at most `[state] max_value_bytes` bytes as "
            "compact UTF-8 JSON"
        },
        "ttl": _TTL_SCHEMA,
    },
    ("value",),
)
# An empty body adds 1 with the default ttl.
INCREMENT_BODY = _body(
    "StateIncrementBody",
    {
        "by": {
            "type": "integer",
            "default": 1,
            "description": "What to add (may be negative); the result must stay within 64-bit signed "
            "integers",
        },
        "ttl": _TTL_SCHEMA,
    },
)
KEYS_BODY = _body(
    "StateKeysBody",
    {"keys": {"type": "array", "items": {"type": "string"}, "maxItems": 1000}},
    ("keys",),
)
VALUES_BODY = _body(
    "StateValuesBody",
    {
        "values": {
            "type": "object",
            "maxProperties": 1000,
            "description": "Keys and their values (any JSON document except null)",
        },
        "ttl": _TTL_SCHEMA,
    },
    ("values",),
)


class StateValueResponse(BaseModel):
    key: str
    value: JsonValue
    # The key's version (1 when created, one more on every write); None from a backend without
    # versions. The key's expiry is left out on purpose: finding it would cost the task's reads a
    # second lookup on some backends, and task code has no use for it (operators see it in the
    # operator API, the CLI and the UI).
    version: int | None = None


class StateWriteResponse(BaseModel):
    key: str
    # The version the write created; None from a backend without versions.
    version: int | None


class StateIncrementResponse(BaseModel):
    key: str
    # The integer stored after the increment.
    value: int


class StateValuesResponse(BaseModel):
    # The keys asked for that hold a value; the others are left out.
    values: dict[str, JsonValue]


class StateVersionsResponse(BaseModel):
    # Each key written and its new version; None from a backend without versions.
    versions: dict[str, int | None]


class StateKeysResponse(BaseModel):
    keys: list[str]


# --- the handshake ---------------------------------------------------------------------------
# Bounded, so an unauthenticated caller cannot make the server hash or parse large bodies.


class CredentialRequest(BaseModel):
    task_instance_id: UUID
    verifier: str = Field(min_length=32, max_length=256)


class CredentialResponse(BaseModel):
    credential: str
    expires_in: int
