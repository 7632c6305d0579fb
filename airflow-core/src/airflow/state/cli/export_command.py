"""
``airflow state export``: every stored key, as JSON lines (:mod:`.transfer_format`), from the
configured backend.

Memory stays bounded whatever the deployment holds: dag runs are read a page at a time (by id),
and each scope's entries a page at a time. The export is not a snapshot: a task writing meanwhile
may or may not be in it.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TextIO

from airflow.state import manage
from airflow.state.cli.errors import configured_backend, fail, one_line_errors
from airflow.state.cli.transfer_format import asset_row, dump_row, task_row
from airflow.utils.cli import suppress_logs_and_warning
from airflow.utils.providers_configuration_loader import providers_configuration_loaded
from airflow.utils.session import create_session
from airflow_shared.state import AssetScope, StateScope, TaskScope

RUN_PAGE = 500
ENTRY_PAGE = 500


@dataclass
class Exported:
    keys: int = 0
    scopes: int = 0

    def add(self, keys: int) -> None:
        if keys:
            self.keys += keys
            self.scopes += 1


@suppress_logs_and_warning
@providers_configuration_loaded
@one_line_errors
def export_state(args: Namespace) -> None:
    configured_backend()
    with_tasks, with_assets = _kinds(args)
    to_stdout = args.file in (None, "-")
    tasks, assets = Exported(), Exported()
    with _destination(None if to_stdout else args.file) as out:
        if with_tasks:
            for scope in _task_scopes_with_state(args.dag_id, args.run_id):
                tasks.add(_write_rows(out, scope, partial(task_row, scope)))
        if with_assets:
            for asset in _assets_with_state(args.asset_name, args.asset_uri):
                assets.add(_write_rows(out, AssetScope(asset.asset_id), partial(asset_row, asset)))
    where = "" if to_stdout else f" to {args.file}"
    # With the rows on stdout, the report goes to stderr so that the output stays JSON lines.
    print(
        f"Exported {_count(tasks.keys, 'key')} of {_count(tasks.scopes, 'task instance')} and "
        f"{_count(assets.keys, 'key')} of {_count(assets.scopes, 'asset')}{where}",
        file=sys.stderr if to_stdout else sys.stdout,
    )


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def _kinds(args: Namespace) -> tuple[bool, bool]:
    """
    Whether task state and asset state are exported. Filters name what is exported: with only
    task filters (--dag-id/--run-id) no asset state, with only asset filters no task state.
    """
    if args.tasks_only and args.assets_only:
        raise fail("give --tasks-only or --assets-only, not both")
    task_filter = [flag for flag, value in (("--dag-id", args.dag_id), ("--run-id", args.run_id)) if value]
    asset_filter = [
        flag for flag, value in (("--asset-name", args.asset_name), ("--asset-uri", args.asset_uri)) if value
    ]
    if args.tasks_only and asset_filter:
        raise fail(f"--tasks-only exports no asset state; leave out {', '.join(asset_filter)}")
    if args.assets_only and task_filter:
        raise fail(f"--assets-only exports no task state; leave out {', '.join(task_filter)}")
    with_tasks = not args.assets_only and (bool(task_filter) or not asset_filter)
    with_assets = not args.tasks_only and (bool(asset_filter) or not task_filter)
    return with_tasks, with_assets


@contextmanager
def _destination(path: str | None) -> Iterator[TextIO]:
    """
    stdout, or *path* written through a temporary file beside it and renamed at the end, so that
    a failed export never leaves a half file where a whole one is expected.
    """
    if path is None:
        yield sys.stdout
        return
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as out:
            yield out
        os.replace(partial, path)
    except OSError as error:
        raise fail(f"cannot write {path}: {error.strerror}") from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _write_rows(out: TextIO, scope: StateScope, row_of: Callable[[manage.Entry], dict[str, Any]]) -> int:
    written = 0
    for entry in _every_entry(scope):
        out.write(dump_row(row_of(entry)) + "\n")
        written += 1
    return written


def _every_entry(scope: StateScope) -> Iterator[manage.Entry]:
    offset = 0
    while True:
        page, total = manage.entries(scope, offset=offset, limit=ENTRY_PAGE)
        yield from page
        offset += len(page)
        if not page or offset >= total:
            return


def _task_scopes_with_state(dag_id: str | None, run_id: str | None) -> Iterator[TaskScope]:
    """The scopes of the task instances that hold state, run by run (runs in order of their ids)."""
    for run_dag_id, run_run_id in _dag_runs(dag_id, run_id):
        with create_session() as session:
            try:
                holding = manage.task_instances_with_state(run_dag_id, run_run_id, session)
            except manage.NotFound:
                continue  # deleted since it was listed: its state went with it
        for ti in holding:
            yield ti.scope


def _dag_runs(dag_id: str | None, run_id: str | None) -> Iterator[tuple[str, str]]:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    last_id = None
    while True:
        query = select(DagRun.id, DagRun.dag_id, DagRun.run_id).order_by(DagRun.id).limit(RUN_PAGE)
        if last_id is not None:
            query = query.where(DagRun.id > last_id)
        if dag_id is not None:
            query = query.where(DagRun.dag_id == dag_id)
        if run_id is not None:
            query = query.where(DagRun.run_id == run_id)
        # A session per page, closed before the page's state is read from the backend.
        with create_session() as session:
            page = session.execute(query).all()
        if not page:
            return
        for row in page:
            yield row.dag_id, row.run_id
        last_id = page[-1].id


def _assets_with_state(name: str | None, uri: str | None) -> list[manage.AssetInfo]:
    """The assets holding state, only those the filters name; a filter that names none is an error."""
    with create_session() as session:
        named = None
        if name is not None or uri is not None:
            named = {asset.asset_id for asset in manage.matching_assets(session, name=name, uri=uri)}
        holding = manage.assets_with_state(session)
    return [asset for asset, _ in holding if named is None or asset.asset_id in named]
