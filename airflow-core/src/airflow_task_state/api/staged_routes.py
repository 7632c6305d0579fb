"""
The commit of a try's staged writes, sent once the try has succeeded and applied in one atomic step.
Its id is the try's task instance id, taken from the credential, never from the body: a retried
request (its reply lost) applies nothing twice.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures at runtime.

from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

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

from airflow_task_state import codec, expiry
from airflow_task_state.api.asset_declarations import declared_asset_id
from airflow_task_state.api.authentication import Claims
from airflow_task_state.api.errors import DOCUMENTED, UNSUPPORTED_DOCUMENTED, refused_as, unprocessable
from airflow_task_state.api.one_key import writer_of
from airflow_task_state.api.params import body_ttl, fields_only, json_object
from airflow_task_state.api.task_instance_checks import check_task_instance
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.protocol import TASK_STAGED_COMMIT_PATH, TTL_FIELD, Reason

router = APIRouter()

_WRITE_SHAPE = (
    '{"scope": "task" | "asset", "name": <asset name> (asset), "uri": <asset URI> (asset), '
    '"key": <key>, "op": "set" | "delete" | "increment", "value": <any JSON but null> (set), '
    '"by": <integer> (increment), "ttl": <seconds> | "never" (optional, not for delete)}'
)
_COMMIT_SHAPE = '{"writes": [' + _WRITE_SHAPE + ", ...]}"
# The fields of every write, and those of each op.
_COMMON_FIELDS = frozenset({"scope", "name", "uri", "key", "op"})
_OP_FIELDS = {
    StagedOp.SET: {"value", TTL_FIELD},
    StagedOp.INCREMENT: {"by", TTL_FIELD},
    StagedOp.DELETE: set(),
}
_WRITE_FIELDS = _COMMON_FIELDS.union(*_OP_FIELDS.values())


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
    fields_only(document, _WRITE_FIELDS, f"{where}each write must be {_WRITE_SHAPE}", Reason.INVALID_REQUEST)
    asset: tuple[str | None, str | None] | None = None
    if document.get("scope") == "asset":
        asset = (document.get("name") or None, document.get("uri") or None)
        if asset == (None, None) or not all(isinstance(part, str | None) for part in asset):
            raise unprocessable(
                Reason.INVALID_REQUEST, f"{where}an asset write names the asset (name or uri)"
            )
    elif document.get("scope") != "task" or "name" in document or "uri" in document:
        raise unprocessable(Reason.INVALID_REQUEST, f'{where}scope must be "task" or "asset" (with name/uri)')
    key = document.get("key")
    with refused_as(Reason.INVALID_KEY, where):
        validate_key(key)
    assert isinstance(key, str)
    if asset is None and key == COMMIT_KEY:
        raise unprocessable(
            Reason.INVALID_KEY, f"{where}task state key {COMMIT_KEY!r} is reserved, use another key"
        )
    try:
        op = StagedOp(str(document.get("op")))
    except ValueError:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}op must be set, delete or increment") from None
    extra = sorted(set(document) - _COMMON_FIELDS - _OP_FIELDS[op])
    if extra:
        raise unprocessable(Reason.INVALID_REQUEST, f"{where}a {op} carries no {' or '.join(extra)}")
    text = None
    if op is StagedOp.SET:
        if document.get("value") is None:
            raise unprocessable(Reason.INVALID_VALUE, f"{where}a set carries a value (any JSON but null)")
        with refused_as(Reason.INVALID_VALUE, f"{where}the value of key {key!r:.60}: "):
            text = codec.encode(document["value"])
    by = document.get("by", 1)
    with refused_as(Reason.INVALID_REQUEST, where):
        validate_increment(by)
    return _Write(asset, key, op, text, by, body_ttl(document, _WRITE_SHAPE))


async def _commit_body(request: Request) -> list[_Write]:
    explanation = "a commit is limited by [state] max_batch_bytes; stage fewer or smaller writes"
    document = await json_object(
        request,
        frozenset({"writes"}),
        _COMMIT_SHAPE,
        Reason.INVALID_REQUEST,
        batch=explanation,
        holding=("writes", list),
    )
    writes = document["writes"]
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

    @cache
    def asset_scope(name: str | None, uri: str | None) -> AssetScope:
        return AssetScope(declared_asset_id(claims, name, uri, write=True))

    writes = []
    for write in body:
        scope: StateScope = ledger if write.asset is None else asset_scope(*write.asset)
        expires_at = None if write.op is StagedOp.DELETE else expiry.expires_at_for(scope, write.ttl, backend)
        writes.append(StagedWrite(scope, write.key, write.op, write.text, write.by, expires_at))
    with refused_as(Reason.INVALID_VALUE):  # a key written twice; an increment of a non-integer
        commit = StagedCommit(claims.ti_id, ledger, tuple(writes), writer_of(claims))
        applied = backend.apply_commit(commit)
    return StagedCommitResponse(applied=applied, writes=len(writes))
