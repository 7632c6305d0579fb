"""Response bodies of the operators' REST API, described for its OpenAPI schema."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, JsonValue

if TYPE_CHECKING:
    from airflow.state.manage import Entry

# The body of a write. The routes read it themselves, only after the caller is authorized and never
# past the size limit, so it is described here for the OpenAPI schema rather than parsed by FastAPI.
WRITE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "StateEntryBody",
                    "required": ["value"],
                    "additionalProperties": False,
                    "properties": {
                        "value": {
                            "description": "The new value: any JSON document except null, at most "
                            "`[state] max_value_bytes` bytes as compact UTF-8 JSON"
                        }
                    },
                }
            }
        },
    }
}


class StateEntryResponse(BaseModel):
    """One key of a task instance's or an asset's state."""

    key: str = Field(description="The state key")
    value: JsonValue = Field(description="The stored JSON value (never null)")
    updated_at: datetime | None = Field(
        description="When the key was last written (UTC); null when the backend does not record it"
    )
    updated_by_try: int | None = Field(
        description="The try of the task instance that last wrote the key; null for asset state and "
        "for writes made by operators (this API, the CLI)"
    )

    @classmethod
    def of(cls, entry: Entry) -> StateEntryResponse:
        return cls(
            key=entry.key, value=entry.value, updated_at=entry.updated_at, updated_by_try=entry.updated_by_try
        )


class _EntryPage(BaseModel):
    entries: list[StateEntryResponse] = Field(description="This page of entries, sorted by key")
    total_entries: int = Field(description="How many keys match, on every page together")
    can_edit: bool = Field(description="Whether the caller may write keys of this state")
    can_delete: bool = Field(description="Whether the caller may delete keys of this state, or clear it")


class TaskStateEntriesResponse(_EntryPage):
    """A page of one task instance's state."""


class TaskInstanceWithState(BaseModel):
    """A task instance of the dag run that holds state."""

    task_id: str = Field(description="The task id")
    map_index: int = Field(description="The map index; -1 for a task that is not mapped")
    key_count: int = Field(description="How many keys the task instance's state holds")


class TaskInstancesWithStateResponse(BaseModel):
    """The task instances of a dag run that hold state."""

    task_instances: list[TaskInstanceWithState] = Field(description="Sorted by task id, then map index")
    total_entries: int = Field(description="How many task instances of the run hold state")
    can_edit: bool = Field(description="Whether the caller may write task state of this DAG")
    can_delete: bool = Field(description="Whether the caller may delete task state of this DAG")


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

    asset: AssetResponse = Field(description="The asset whose state this is")
