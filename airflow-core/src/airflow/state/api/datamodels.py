"""Request and response bodies of the state API."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field, JsonValue

# The bodies of a write and of an increment. Routes read them themselves, after the credential is
# verified and within the size limit, so they are described here for the OpenAPI schema rather than
# parsed by FastAPI.
_TTL_SCHEMA: dict[str, Any] = {
    "description": "How long the key lives after this write: a positive number of seconds, or "
    '"never". Absent: the default (task state: [state] default_task_retention; asset state: never)',
    "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string", "enum": ["never"]}],
}
VALUE_BODY_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "title": "StateValueBody",
        "required": ["value"],
        "additionalProperties": False,
        "properties": {"value": {"description": "Any JSON document except null"}, "ttl": _TTL_SCHEMA},
    }
}
INCREMENT_BODY_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "title": "StateIncrementBody",
        "additionalProperties": False,
        "properties": {
            "by": {"type": "integer", "default": 1, "description": "What to add (may be negative)"},
            "ttl": _TTL_SCHEMA,
        },
    }
}

# The bodies of the batch routes (read by the routes themselves, like the bodies above).
KEYS_BODY_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "title": "StateKeysBody",
        "required": ["keys"],
        "additionalProperties": False,
        "properties": {"keys": {"type": "array", "items": {"type": "string"}, "maxItems": 1000}},
    }
}
VALUES_BODY_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "title": "StateValuesBody",
        "required": ["values"],
        "additionalProperties": False,
        "properties": {
            "values": {
                "type": "object",
                "maxProperties": 1000,
                "description": "Keys and their values (any JSON document except null)",
            },
            "ttl": _TTL_SCHEMA,
        },
    }
}


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
