"""Request and response bodies of the state API."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field, JsonValue

# The body of a write. Routes read it themselves, after the credential is verified and within the size
# limit, so it is described here for the OpenAPI schema rather than parsed by FastAPI.
VALUE_BODY_SCHEMA: dict[str, Any] = {
    "schema": {
        "type": "object",
        "title": "StateValueBody",
        "required": ["value"],
        "additionalProperties": False,
        "properties": {"value": {"description": "Any JSON document except null"}},
    }
}


class StateValueResponse(BaseModel):
    key: str
    value: JsonValue


class StateKeysResponse(BaseModel):
    keys: list[str]


# --- the handshake ---------------------------------------------------------------------------
# Bounded, so an unauthenticated caller cannot make the server hash or parse large bodies.


class ChallengeRequest(BaseModel):
    task_instance_id: UUID


class ChallengeResponse(BaseModel):
    challenge: str
    # Where the task's supervisor must put protocol.proof(challenge, verifier).
    field: str
    expires_in: int


class CredentialRequest(BaseModel):
    challenge: str = Field(max_length=2048)
    verifier: str = Field(min_length=32, max_length=256)


class CredentialResponse(BaseModel):
    credential: str
    expires_in: int
