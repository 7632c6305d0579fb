"""
Run with Airflow 3.3: apply a list of operations to Airflow 3.3's own configured state store backend
(``airflow.state.get_state_backend()``, as its Execution API and ``airflow state-store clean`` call it).

argv[1]: a file holding a JSON list of ``{"op", "scope", ...}``; stdout: a JSON list with one result
per operation (``{"value": ...}`` or ``{"error": "<type>: <message>"}``). Scopes are
``{"task": [dag_id, run_id, task_id, map_index]}`` or ``{"asset": {"asset_id"|"name"|"uri": ...}}``.
``"session": true`` passes a session of Airflow's own, as its API routes do; otherwise the backend opens one.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path

from airflow.state import AssetScope, TaskScope, get_state_backend, resolve_state_backend
from airflow.utils.session import create_session, create_session_async

#: Starts the line of stdout that holds the results (Airflow may log to stdout too).
RESULTS = "OPS-RESULTS "


def scope_of(spec: dict) -> TaskScope | AssetScope:
    if "task" in spec:
        return TaskScope(*spec["task"])
    return AssetScope(**spec["asset"])


def call(backend, op: dict, session) -> object:
    """Call the method *op* names: ``get``, ``set``, ``delete``, ``clear``, or ``a...`` (an awaitable)."""
    name, method = op["op"], op["op"].removeprefix("a")
    if method not in ("get", "set", "delete", "clear"):
        raise ValueError(f"unknown op {name}")
    args: tuple = (scope_of(op["scope"]),)
    kwargs: dict = {"session": session}
    if method == "clear":
        kwargs["all_map_indices"] = op.get("all_map_indices", False)
    else:
        args += (op["key"],)
    if method == "set":
        args += (op["value"],)
        expires = op.get("expires_at")
        kwargs["expires_at"] = datetime.fromisoformat(expires) if expires else None
    return getattr(backend, name)(*args, **kwargs)


async def run_async(backend, op: dict) -> object:
    if op.get("session"):
        async with create_session_async() as session:
            return await call(backend, op, session)
    return await call(backend, op, None)


def recreate_run(dag_id: str, run_id: str) -> None:
    """Delete a dag run and insert it again with the same run_id (a new id and created_at)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils import timezone
    from sqlalchemy import delete, insert, select

    table = DagRun.__table__
    with create_session() as session:
        where = (table.c.dag_id == dag_id) & (table.c.run_id == run_id)
        row = dict(session.execute(select(table).where(where)).mappings().one())
        session.execute(delete(table).where(where))
        row.pop("id")
        row["created_at"] = timezone.utcnow()
        session.execute(insert(table).values(**row))


def backends() -> dict[str, str]:
    """The class Airflow 3.3 resolves for its store, and the one it passes each call on to (ours)."""
    from airflow_task_state import resolve_state_backend as ours

    return {
        name: f"{cls.__module__}.{cls.__qualname__}"
        for name, cls in (("state_store", resolve_state_backend()), ("state", ours()))
    }


async def run(backend, op: dict) -> object:
    if op["op"] == "backends":
        return backends()
    if op["op"] == "recreate_run":
        return recreate_run(*op["run"])
    if op["op"] == "cleanup":
        return backend.cleanup()
    if op["op"].startswith("a"):
        return await run_async(backend, op)
    if op.get("session"):
        with create_session() as session:
            return call(backend, op, session)
    return call(backend, op, None)


async def main() -> None:
    # One event loop for every operation: Airflow's async engine and redis.asyncio clients are
    # bound to the loop that opened them.
    backend = get_state_backend()
    results = []
    for op in json.loads(Path(sys.argv[1]).read_text()):
        try:
            results.append({"value": await run(backend, op)})
        except Exception as error:
            results.append({"error": f"{type(error).__name__}: {error}"})
    # Closed here, in its loop: a pooled async connection left for the interpreter's exit logs errors.
    from airflow import settings

    if settings.async_engine is not None:
        await settings.async_engine.dispose()
    print(RESULTS + json.dumps(results))


asyncio.run(main())
