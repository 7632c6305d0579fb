"""Request and response bodies of the state API."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, JsonValue

# The body of a write. Routes read it themselves, after the token is verified and within the size
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
