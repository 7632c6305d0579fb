"""
What the operator routes read from a request: the key (in the path or the ``key`` query parameter),
the new value, and the paging and map index parameters.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from airflow.state import codec
from airflow.state.api.errors import unprocessable

# The task routes' reader of a body (size cap before parsing) and their strict `key` query
# parameter: one rule for both APIs.
from airflow.state.api.routes import BODY_ENVELOPE_BYTES, Key, _body_within
from airflow.state.protocol import Reason
from airflow_shared.state import validate_key
from fastapi import Depends, Path, Query, Request

__all__ = ["AssetId", "KeyPrefix", "Limit", "MapIndex", "NewValue", "Offset", "PathKey", "QueryKey"]

QueryKey = Key

# Airflow's map_index and asset id columns are 32-bit integers: a larger number names nothing, and
# some databases (SQLite) cannot even compare with it. Offsets get the same bound.
LARGEST_INTEGER = 2**31 - 1

MapIndex = Annotated[
    int,
    Query(
        ge=-1,
        le=LARGEST_INTEGER,
        description="The task instance's map index; -1 (the default) for a task that is not mapped",
    ),
]
AssetId = Annotated[int, Path(ge=0, le=LARGEST_INTEGER, description="The asset's id")]
Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many entries (1 to 1000)")]
Offset = Annotated[int, Query(ge=0, le=LARGEST_INTEGER, description="Skip this many entries first")]


def _key_prefix(
    key_prefix: Annotated[
        str | None, Query(description="Only keys that start with this text (plain text, not a pattern)")
    ] = None,
) -> str | None:
    if key_prefix and "\x00" in key_prefix:
        raise unprocessable(Reason.INVALID_REQUEST, "key_prefix must not contain NUL (\\x00) characters")
    return key_prefix or None


KeyPrefix = Annotated[str | None, Depends(_key_prefix)]

_USE_QUERY_FORM = "give such a key as the `key` query parameter of the `stateEntry` route instead"


def _path_key(request: Request, key: Annotated[str, Path(description="The state key")]) -> str:
    """
    The key at the end of the path, refused unless it is exactly the key the caller meant.

    Clients and proxies normalise paths: `.` and `..` segments are resolved (browsers do it even
    to `%2e`), runs of slashes may be merged (nginx's default), and a server replaces invalid
    UTF-8. A key with such a segment could only arrive here percent-encoded or from a raw client,
    and elsewhere would silently become another key, so the path form takes none of them.
    """
    raw_path = request.scope.get("raw_path")
    if raw_path is not None:
        try:
            unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError:
            raise unprocessable(
                Reason.INVALID_KEY, f"the path is not valid UTF-8; {_USE_QUERY_FORM}"
            ) from None
    if key == "":
        raise unprocessable(Reason.INVALID_KEY, f"the key in the path is empty; {_USE_QUERY_FORM}")
    segments = key.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise unprocessable(
            Reason.INVALID_KEY,
            f"the key {key!r} has an empty, '.' or '..' path segment, which HTTP clients and proxies "
            f"rewrite; {_USE_QUERY_FORM}",
        )
    try:
        validate_key(key)
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_KEY, error) from None
    return key


PathKey = Annotated[str, Depends(_path_key)]


async def _new_value(request: Request) -> Any:
    """
    The value of a ``{"value": ...}`` body, checked by the codec that stores it. Declared after the
    access dependency of its route, so that nobody unauthorized makes the server read a body.
    """
    body = await _body_within(request, codec.max_value_bytes() + BODY_ENVELOPE_BYTES)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise unprocessable(Reason.INVALID_VALUE, f"request body is not JSON: {error}") from None
    if not isinstance(document, dict) or list(document) != ["value"] or document["value"] is None:
        raise unprocessable(
            Reason.INVALID_VALUE,
            'request body must be {"value": <any JSON but null>}; to remove a key, DELETE it',
        )
    value = document["value"]
    try:
        codec.encode(value)
    except (TypeError, ValueError) as error:
        raise unprocessable(Reason.INVALID_VALUE, error) from None
    return value


NewValue = Annotated[Any, Depends(_new_value)]
