"""
The commit of a try's staged writes: once the try has succeeded, its task process sends every write
it staged (task state and the state of assets it declares as outlets) in one request, and the
backend applies them in one atomic step, at most once per try.

Everything is checked before anything is written: the try must be in ``success`` (so a failed,
killed or cleared try commits nothing, whatever its process sends), every asset must be an outlet
of the task, and every key, value, increment and ttl must be valid; the body is bounded by
``[state] max_batch_bytes``. The commit's id is the try's task instance id, taken from the
credential, never from the body: a retried request (its reply lost) applies nothing twice.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures at runtime.

from dataclasses import dataclass
from typing import Annotated, Any

from airflow.state import codec, config, expiry
from airflow.state.api.errors import DOCUMENTED, UNSUPPORTED_DOCUMENTED, refused_as, unprocessable
from airflow.state.api.params import body_ttl, json_object
from airflow.state.api.routes import writer_of
from airflow.state.api.security import Claims, check_task_instance, declared_asset_id
from airflow.state.configured_backend import get_state_backend
from airflow.state.protocol import TASK_STAGED_COMMIT_PATH, TTL_FIELD, Reason
from airflow_shared.state import (
    COMMIT_KEY,
    AssetScope,
    StagedCommit,
    StagedOp,
    StagedWrite,
    StateScope,
    validate_batch_size,
    validate_increment,
    validate_key,
)
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

router = APIRouter()

_WRITE_SHAPE = (
    '{"scope": "task" | "asset", "name": <asset name> (asset), "uri": <asset URI> (asset), '
    '"key": <key>, "op": "set" | "delete" | "increment", "value": <any JSON but null> (set), '
    '"by": <integer> (increment), "ttl": <seconds> | "never" (optional, not for delete)}'
)
_COMMIT_SHAPE = '{"writes": [' + _WRITE_SHAPE + ", ...]}"
_WRITE_FIELDS = frozenset({"scope", "name", "uri", "key", "op", "value", "by", TTL_FIELD})


@dataclass(frozen=True)
class _Write:
    """One staged write as the body gives it; its scope is found once the try is checked."""

    asset: tuple[str | None, str | None] | None  # (name, uri); None: the task instance's state
    key: str
    op: StagedOp
    text: str | None
    by: int
    ttl: expiry.Ttl


def _write_of(position: int, document: Any) -> _Write:
    where = f"writes[{position}]: "
    if not isinstance(document, dict) or not _WRITE_FIELDS.issuperset(document):
        unknown = sorted(set(document) - _WRITE_FIELDS) if isinstance(document, dict) else []
        named = f" (unknown: {', '.join(unknown)})" if unknown else ""
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}each write must be {_WRITE_SHAPE}{named}")
    scope = document.get("scope")
    asset: tuple[str | None, str | None] | None = None
    if scope == "asset":
        name, uri = document.get("name"), document.get("uri")
        if not (isinstance(name, str) and name) and not (isinstance(uri, str) and uri):
            raise unprocessable(
                Reason.INVALID_REQUEST, f"{where}an asset write names the asset (name or uri)"
            )
        asset = (name or None, uri or None)
    elif scope != "task" or "name" in document or "uri" in document:
        raise unprocessable(Reason.INVALID_REQUEST, f'{where}scope must be "task" or "asset" (with name/uri)')
    key = document.get("key")
    with refused_as(Reason.INVALID_KEY, where):
        validate_key(key)
    assert isinstance(key, str)
    try:
        op = StagedOp(str(document.get("op")))
    except ValueError:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}op must be set, delete or increment") from None
    text, by = None, 1
    if op is StagedOp.SET:
        if document.get("value") is None:
            raise unprocessable(Reason.INVALID_VALUE, f"{where}a set carries a value (any JSON but null)")
        with refused_as(Reason.INVALID_VALUE, f"{where}the value of key {key!r:.60}: "):
            text = codec.encode(document["value"])
    elif "value" in document:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}only a set carries a value")
    if op is StagedOp.INCREMENT:
        by = document.get("by", 1)
        with refused_as(Reason.INVALID_REQUEST, where):
            validate_increment(by)
    elif "by" in document:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}only an increment carries by")
    if op is StagedOp.DELETE and TTL_FIELD in document:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}a delete carries no ttl")
    return _Write(asset, key, op, text, by, body_ttl(document, _WRITE_SHAPE))


async def _commit_body(request: Request) -> list[_Write]:
    document = await json_object(
        request,
        frozenset({"writes"}),
        _COMMIT_SHAPE,
        Reason.INVALID_REQUEST,
        limit=config.max_batch_bytes(),
        explanation="a commit is limited by [state] max_batch_bytes; stage fewer or smaller writes",
    )
    writes = document.get("writes")
    if not isinstance(writes, list):
        raise unprocessable(Reason.INVALID_REQUEST, f"request body must be {_COMMIT_SHAPE}")
    with refused_as(Reason.INVALID_REQUEST):
        validate_batch_size(len(writes), "a commit")
    return [_write_of(position, write) for position, write in enumerate(writes)]


CommitBody = Annotated[list[_Write], Depends(_commit_body)]


class StagedCommitResponse(BaseModel):
    """What a commit did."""

    applied: bool = Field(
        description="True: the writes were applied now; false: this try's commit was applied before "
        "(a retried request), and nothing was written again"
    )
    writes: int = Field(description="How many staged writes the commit holds")


@router.post(
    TASK_STAGED_COMMIT_PATH,
    responses={**DOCUMENTED, **UNSUPPORTED_DOCUMENTED},
    name="commit_staged_writes",
)
def commit_staged_writes(task_instance_id: str, claims: Claims, body: CommitBody) -> StagedCommitResponse:
    """
    Apply every write the calling try staged, in one atomic step, once the try has succeeded: any
    other state of the task instance, or a later try, is refused (`forbidden`), and so is an asset
    the task does not declare as an outlet (`asset_not_declared`). A body with one bad write is
    refused whole and writes nothing. Sent again for the same try, it applies nothing
    (`applied: false`).
    """
    ledger = check_task_instance(claims, write=False, path_ti_id=task_instance_id, succeeded=True)
    backend = get_state_backend()
    assets: dict[tuple[str | None, str | None], AssetScope] = {}
    writes = []
    for write in body:
        scope: StateScope = ledger
        if write.asset is not None:
            if write.asset not in assets:
                assets[write.asset] = AssetScope(declared_asset_id(claims, *write.asset, write=True))
            scope = assets[write.asset]
        elif write.key == COMMIT_KEY:
            raise unprocessable(
                Reason.INVALID_KEY, f"task state key {COMMIT_KEY!r} is where a commit records itself"
            )
        expires_at = None if write.op is StagedOp.DELETE else expiry.expires_at_for(scope, write.ttl, backend)
        writes.append(StagedWrite(scope, write.key, write.op, write.text, write.by, expires_at))
    with refused_as(Reason.INVALID_VALUE):  # a key written twice; an increment of a non-integer
        commit = StagedCommit(claims.ti_id, ledger, tuple(writes), writer_of(claims))
        applied = backend.apply_commit(commit)
    return StagedCommitResponse(applied=applied, writes=len(writes))
