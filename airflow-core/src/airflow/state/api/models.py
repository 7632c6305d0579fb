"""Request and response bodies of the state API."""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue


class StateValueBody(BaseModel):
    """A value to store: any JSON document except null."""

    value: JsonValue = Field(description="Any JSON document except null")


class StateValueResponse(BaseModel):
    key: str
    value: JsonValue


class StateKeysResponse(BaseModel):
    keys: list[str]
