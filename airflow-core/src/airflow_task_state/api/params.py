"""
What the routes of both HTTP surfaces (the task API and the operators' ``/api/v1``) read from a
request, by one set of rules: the ``key`` query parameter (never the path), ``if_version``, paging,
and the JSON bodies of writes, increments and batches, read only once the caller is authenticated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from airflow_shared.state import (
    MAX_COUNTER,
    validate_batch_size,
    validate_increment,
    validate_key,
    validate_many_keys,
)
from fastapi import Depends, Path, Query, Request

from airflow_task_state import codec, config, expiry
from airflow_task_state.api.errors import refusal, refused_as, unprocessable
from airflow_task_state.protocol import IF_VERSION_PARAMETER, KEY_PARAMETER, NEVER_EXPIRES, TTL_FIELD, Reason

# Airflow's map_index and asset id columns are 32-bit integers: a larger number names nothing, and
# some databases (SQLite) cannot even compare with it. Offsets get the same bound.
LARGEST_INTEGER = 2**31 - 1
# The JSON envelope around a value (`{"value": ..., "ttl": ...}`) and some whitespace.
BODY_ENVELOPE_BYTES = 1024

IfVersion = Annotated[
    int | None,
    Query(
        alias=IF_VERSION_PARAMETER,
        ge=0,
        le=MAX_COUNTER,
        description="Write only if the key is at this version (0: only if it is absent or expired); "
        "otherwise 409 `version_conflict` with the stored version",
    ),
]
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


def _raw_query_values(query_string: bytes, name: str) -> list[str]:
    """
    Every value of *name* in a raw query string, percent-decoded as strict UTF-8 (``UnicodeDecodeError``):
    Starlette's own parsing replaces invalid UTF-8 with U+FFFD, which would store a key never written.
    """
    wanted = name.encode()
    found = []
    for pair in query_string.split(b"&"):
        field, _, value = pair.partition(b"=")
        if unquote_to_bytes(field.replace(b"+", b" ")) == wanted:
            found.append(query_text(value))
    return found


def query_text(raw: bytes) -> str:
    """A raw query value, percent-decoded as strict UTF-8 (``UnicodeDecodeError`` otherwise)."""
    return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")


async def _valid_key(  # async: no thread pool hop (see authentication.credential_claims)
    request: Request,
    key: Annotated[str, Query(description="The state key: any text of 1 to 512 characters, without NUL")],
) -> str:
    with refused_as(Reason.INVALID_KEY, "state key is not valid UTF-8: "):  # UnicodeDecodeError
        keys = _raw_query_values(request.scope["query_string"], KEY_PARAMETER)
    if len(keys) != 1:
        raise unprocessable(Reason.INVALID_KEY, f"give the key parameter once, not {len(keys)} times")
    with refused_as(Reason.INVALID_KEY):
        validate_key(keys[0])
    return keys[0]


Key = Annotated[str, Depends(_valid_key)]


async def body_within(request: Request, limit: int, explanation: str | None = None) -> bytes:
    """The request body, refused (413) past *limit* bytes with *explanation* (default: one value's)."""

    def too_large() -> Exception:  # built only when raised: this runs on every write
        default = (
            f"values are limited to {limit - BODY_ENVELOPE_BYTES} bytes of compact UTF-8 JSON "
            "([state] max_value_bytes)"
        )
        # 413 Content Too Large. Not Starlette's constant: its old name warns on every request since
        # Starlette 0.48, and its new name is missing from the older releases Airflow 3.2 allows.
        message = f"request body is larger than {limit} bytes: {explanation or default}"
        return refusal(413, Reason.BODY_TOO_LARGE, message)

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large()
    return bytes(body)


async def json_object(
    request: Request,
    fields: frozenset[str],
    shape: str,
    reason: Reason,
    *,
    batch: str | None = None,
    empty_is: dict[str, Any] | None = None,
    holding: tuple[str, type] | None = None,
) -> dict[str, Any]:
    """
    The body: a JSON object of *fields* only (else refused with *reason*), of at most one value and
    its envelope, or for a *batch* (what to do past it), ``[state] max_batch_bytes``; an empty one
    is *empty_is* if given. *holding*: a field it must have, and of what type.
    """
    limit = config.max_batch_bytes() if batch else codec.max_value_bytes() + BODY_ENVELOPE_BYTES
    body = await body_within(request, limit, batch)
    if empty_is is not None and not body.strip():
        return empty_is
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise unprocessable(reason, f"request body is not JSON: {error}") from None
    fields_only(document, fields, f"request body must be {shape}", reason)
    if holding is not None and not isinstance(document.get(holding[0]), holding[1]):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {shape}")
    return document


def fields_only(document: Any, fields: frozenset[str], refused: str, reason: Reason) -> None:
    """Refuse (*reason*, message *refused*) a *document* that is not a JSON object of *fields* only."""
    if not isinstance(document, dict) or not fields.issuperset(document):
        unknown = sorted(set(document) - fields) if isinstance(document, dict) else []
        named = f" (unknown: {', '.join(unknown)})" if unknown else ""
        raise unprocessable(reason, f"{refused}{named}")


LONGEST_TTL_SECONDS = int(expiry.LONGEST_TTL.total_seconds())


def body_ttl(document: dict[str, Any], shape: str) -> expiry.Ttl:
    """A write body's ``ttl``: seconds (more than 0, at most a century), ``"never"``, or None (default)."""
    if TTL_FIELD not in document:
        return None
    ttl = document[TTL_FIELD]
    if ttl == NEVER_EXPIRES:
        return expiry.NEVER
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 < ttl <= LONGEST_TTL_SECONDS:
        return timedelta(seconds=ttl)
    raise unprocessable(
        Reason.INVALID_REQUEST,
        f"ttl must be a number of seconds greater than 0 and at most {LONGEST_TTL_SECONDS} "
        f'(100 years), or "{NEVER_EXPIRES}", not {json.dumps(ttl)[:40]}; leave it out for the default; '
        f"request body must be {shape}",
    )


@dataclass(frozen=True)
class WriteBody:
    """A write's body: the value as stored text, and its ``ttl`` (``None``: the default)."""

    text: str
    ttl: expiry.Ttl = None


@dataclass(frozen=True)
class IncrementBody:
    by: int = 1
    ttl: expiry.Ttl = None


_VALUE_SHAPE = '{"value": <any JSON but null>, "ttl": <seconds> | "never" (optional)}'
_INCREMENT_SHAPE = '{"by": <integer, default 1>, "ttl": <seconds> | "never" (optional)}'


async def write_body(request: Request) -> WriteBody:
    document = await json_object(request, frozenset({"value", TTL_FIELD}), _VALUE_SHAPE, Reason.INVALID_VALUE)
    if document.get("value") is None:
        raise unprocessable(
            Reason.INVALID_VALUE, f"request body must be {_VALUE_SHAPE}: no value; to remove a key, DELETE it"
        )
    with refused_as(Reason.INVALID_VALUE):
        text = codec.encode(document["value"])
    return WriteBody(text, body_ttl(document, _VALUE_SHAPE))


async def _increment_body(request: Request) -> IncrementBody:
    """An increment's body; an empty one adds 1 with the default ttl (on both surfaces)."""
    document = await json_object(
        request, frozenset({"by", TTL_FIELD}), _INCREMENT_SHAPE, Reason.INVALID_REQUEST, empty_is={}
    )
    by = document.get("by", 1)
    with refused_as(Reason.INVALID_REQUEST):
        validate_increment(by)
    return IncrementBody(by, body_ttl(document, _INCREMENT_SHAPE))


NewWrite = Annotated[WriteBody, Depends(write_body)]
NewIncrement = Annotated[IncrementBody, Depends(_increment_body)]


# Batches: every key and value is checked before the backend is called.
_KEYS_SHAPE = '{"keys": [<key>, ...]}'
_VALUES_SHAPE = '{"values": {<key>: <any JSON but null>, ...}, "ttl": <seconds> | "never" (optional)}'
_BATCH = "batches are limited by [state] max_batch_bytes; split the batch"


def _valid_keys(keys: list[str] | dict[str, Any]) -> list[str]:
    with refused_as(Reason.INVALID_REQUEST):
        validate_batch_size(len(keys), "a batch")
    with refused_as(Reason.INVALID_KEY):
        return validate_many_keys(keys)


async def _keys_body(request: Request) -> list[str]:
    document = await json_object(
        request,
        frozenset({"keys"}),
        _KEYS_SHAPE,
        Reason.INVALID_REQUEST,
        batch=_BATCH,
        holding=("keys", list),
    )
    return _valid_keys(document["keys"])


@dataclass(frozen=True)
class ValuesBody:
    """A batch write's body: each key's value as stored text, and the batch's ``ttl``."""

    texts: dict[str, str]
    ttl: expiry.Ttl


async def _values_body(request: Request) -> ValuesBody:
    fields = frozenset({"values", TTL_FIELD})
    document = await json_object(
        request, fields, _VALUES_SHAPE, Reason.INVALID_VALUE, batch=_BATCH, holding=("values", dict)
    )
    _valid_keys(document["values"])
    texts = {}
    for key, value in document["values"].items():
        with refused_as(Reason.INVALID_VALUE, f"the value of key {key!r:.60}: "):
            texts[key] = codec.encode(value)
    return ValuesBody(texts, body_ttl(document, _VALUES_SHAPE))


KeysBody = Annotated[list[str], Depends(_keys_body)]
NewValues = Annotated[ValuesBody, Depends(_values_body)]
