"""Request and response bodies of the state API: the task API's and the operators' (``/api/v1``)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self
from uuid import UUID

from pydantic import BaseModel, Field, JsonValue

if TYPE_CHECKING:
    from airflow_shared.state import StateWriter

    from airflow_task_state.manage import Entry

# The request bodies, for the OpenAPI schema of both surfaces. Routes read them themselves (see
# airflow_task_state.api.params), after the caller is authenticated and within the size limit.
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


_VERSION = (
    "The key's version (1 when created, one more on every write); null when the backend keeps no versions"
)


class StateValueResponse(BaseModel):
    key: str
    value: JsonValue
    # No expiry: finding it would cost the task's reads a second lookup on some backends, and task
    # code has no use for it (operators see it in the operator API, the CLI and the UI).
    version: int | None = Field(default=None, description=_VERSION)


class StateWriteResponse(BaseModel):
    """What a write stored: the key's new version."""

    key: str = Field(description="The state key")
    version: int | None = Field(
        description=f"{_VERSION}. Give it as `if_version` to write only if nobody wrote in between"
    )


class StateIncrementResponse(BaseModel):
    """The counter after an increment."""

    key: str = Field(description="The state key")
    value: int = Field(description="The integer stored under the key after adding `by`")


class StateValuesResponse(BaseModel):
    values: dict[str, JsonValue]


class StateVersionsResponse(BaseModel):
    versions: dict[str, int | None]


class StateKeysResponse(BaseModel):
    keys: list[str]


class _Expires(BaseModel):  # first among the bases: its field comes last
    expires_at: datetime | None = Field(description="When the key expires (UTC); null: never")


class StateWriteExpiresResponse(_Expires, StateWriteResponse):
    """What an operator's write stored: the key's new version and when it expires."""


class StateIncrementExpiresResponse(_Expires, StateIncrementResponse):
    """The counter after an operator's increment, and when it expires."""


class WriterResponse(BaseModel):
    """Who last wrote an asset's key."""

    kind: str = Field(description="`task` (a try of a task instance), `api` (this API) or `cli`")
    dag_id: str | None = Field(description="The writing task instance's DAG; null unless `kind` is `task`")
    run_id: str | None = Field(description="Its dag run's run id; null unless `kind` is `task`")
    task_id: str | None = Field(description="Its task id; null unless `kind` is `task`")
    map_index: int | None = Field(description="Its map index (-1: not mapped); null unless `kind` is `task`")
    try_number: int | None = Field(description="The try that wrote; null unless `kind` is `task`")

    @classmethod
    def of(cls, writer: StateWriter) -> WriterResponse:
        return cls(**{**asdict(writer), "kind": writer.kind.value})


class StateEntryFields(BaseModel):
    """What every key's entry has; who wrote it is said differently by task and asset state."""

    key: str = Field(description="The state key")
    value: JsonValue = Field(description="The stored JSON value (never null)")
    updated_at: datetime | None = Field(
        description="When the key was last written (UTC); null when the backend does not record it"
    )
    version: int | None = Field(description=_VERSION)
    expires_at: datetime | None = Field(
        description="When the key expires (UTC); null: never. Expired keys are never returned"
    )

    @classmethod
    def of(cls, entry: Entry) -> Self:
        # The fields of Entry the response has: a task's entry the try, an asset's the writer.
        fields = {name: getattr(entry, name) for name in cls.model_fields}
        if fields.get("updated_by") is not None:
            fields["updated_by"] = WriterResponse.of(fields["updated_by"])
        return cls(**fields)


class StateEntryResponse(StateEntryFields):
    """One key of a task instance's state, with the try that last wrote it."""

    updated_by_try: int | None = Field(
        description="The try of the task instance that last wrote the key; null for writes made by "
        "operators (this API, the CLI)"
    )


class AssetStateEntryResponse(StateEntryFields):
    """
    One key of an asset's state, with who last wrote it. No ``updated_by_try``: an asset has no
    tries; the try of a task that wrote it is ``updated_by.try_number``.
    """

    updated_by: WriterResponse | None = Field(
        description="Who last wrote the key: a task instance's try, `api` or `cli`; null when the "
        "backend does not record it"
    )


class _Permissions(BaseModel):
    can_edit: bool = Field(description="Whether the caller may write keys of this state")
    can_delete: bool = Field(description="Whether the caller may delete keys of this state, or clear it")


class _EntryPage(_Permissions):
    total_entries: int = Field(description="How many keys match, on every page together")


class TaskStateEntriesResponse(_EntryPage):
    """A page of one task instance's state."""

    entries: list[StateEntryResponse] = Field(description="This page of entries, sorted by key")


class TaskInstanceWithState(BaseModel):
    """A task instance of the dag run that holds state."""

    task_id: str = Field(description="The task id")
    map_index: int = Field(description="The map index; -1 for a task that is not mapped")
    key_count: int = Field(description="How many keys the task instance's state holds")


class TaskInstancesWithStateResponse(_Permissions):
    """The task instances of a dag run that hold state (the permissions: on task state of this DAG)."""

    task_instances: list[TaskInstanceWithState] = Field(description="Sorted by task id, then map index")
    total_entries: int = Field(description="How many task instances of the run hold state")


class AssetResponse(BaseModel):
    """An asset, as Airflow names it."""

    asset_id: int = Field(description="The asset's id")
    name: str = Field(description="The asset's name")
    uri: str = Field(description="The asset's URI")
    group: str = Field(description="The asset's group")


class AssetWithState(AssetResponse):
    """An asset that holds state."""

    key_count: int = Field(description="How many keys the asset's state holds")


class AssetsWithStateResponse(BaseModel):
    """A page of the assets that hold state (those the caller may read)."""

    assets: list[AssetWithState] = Field(description="This page of assets, sorted by name, then URI")
    total_entries: int = Field(description="How many assets hold state, on every page together")
    can_edit: bool = Field(description="Whether the caller may write asset state")


class AssetStateEntriesResponse(_EntryPage):
    """A page of one asset's state."""

    entries: list[AssetStateEntryResponse] = Field(description="This page of entries, sorted by key")
    asset: AssetResponse = Field(description="The asset whose state this is")


# The handshake's: bounded, so an unauthenticated caller cannot make the server hash or parse large bodies.


class CredentialRequest(BaseModel):
    task_instance_id: UUID
    verifier: str = Field(min_length=32, max_length=256)


class CredentialResponse(BaseModel):
    credential: str
    expires_in: int
