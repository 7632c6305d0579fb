"""Request and response bodies of the state API."""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue

# How the API says "this key has no value"; the client treats any other 404 as an error (a wrong
# api_url, an unknown asset).
MISSING_KEY_DETAIL = "no state under key"


class StateValueBody(BaseModel):
    """A value to store: any JSON document except null."""

    value: JsonValue = Field(description="Any JSON document except null")


class StateValueResponse(BaseModel):
    key: str
    value: JsonValue


class StateKeysResponse(BaseModel):
    keys: list[str]
