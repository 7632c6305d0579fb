"""
``airflow state export``. Dag runs and each scope's entries are read a page at a time, so memory
stays bounded. The export is not a snapshot: a task writing meanwhile may or may not be in it.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from airflow.utils.session import create_session
from airflow_shared.state import AssetScope, TaskScope

from airflow_task_state import manage
from airflow_task_state.airflow_db.lookups import dag_runs, matching_assets
from airflow_task_state.cli.errors import command, configured_backend
from airflow_task_state.cli.formats import count, dump_row, export_row
from airflow_task_state.cli.progress import Progress

RUN_PAGE = 500
ENTRY_PAGE = 500


@command(writes=False)
def export_state(args: Namespace) -> None:
    configured_backend()
    with_tasks, with_assets = _kinds(args)
    to_stdout = args.file in (None, "-")
    # On stderr, never among the rows; and not when the rows go to the same terminal.
    progress = Progress(enabled=sys.stderr.isatty() and not (to_stdout and sys.stdout.isatty()))
    tally = _Tally()
    with progress, _destination(None if to_stdout else args.file) as out:
        for scope in _task_scopes_with_state(args, tally, progress) if with_tasks else ():
            tally.tasks.append(_write_rows(out, scope))
            progress.show(f"Exporting: {tally}")
        for asset in _assets_with_state(args) if with_assets else ():
            tally.assets.append(_write_rows(out, asset))
            progress.show(f"Exporting: {tally}")
        progress.done(f"Exporting: {tally}")
    where = "" if to_stdout else f" to {args.file}"
    # With the rows on stdout, the report goes to stderr so that the output stays JSON lines.
    print(f"Exported {tally.exported()}{where}", file=sys.stderr if to_stdout else sys.stdout)


@dataclass
class _Tally:
    """How many keys each task instance and asset had (0: all deleted since it was listed)."""

    tasks: list[int] = field(default_factory=list)
    assets: list[int] = field(default_factory=list)
    #: Dag runs looked at so far: most hold no state, and an export walks every one.
    runs: int = 0

    def exported(self) -> str:
        return f"{_keys_of(self.tasks, 'task instance')} and {_keys_of(self.assets, 'asset')}"

    def __str__(self) -> str:
        return f"{self.exported()} ({count(self.runs, 'dag run')} read)"


def _keys_of(written: list[int], holder: str) -> str:
    return f"{count(sum(written), 'key')} of {count(sum(1 for keys in written if keys), holder)}"


def _kinds(args: Namespace) -> tuple[bool, bool]:
    """Whether task state and asset state are exported: filters of only one kind export only that kind."""
    if args.tasks_only and args.assets_only:
        raise SystemExit("give --tasks-only or --assets-only, not both")
    task_filter = [flag for flag, value in (("--dag-id", args.dag_id), ("--run-id", args.run_id)) if value]
    asset_filter = [
        flag for flag, value in (("--asset-name", args.asset_name), ("--asset-uri", args.asset_uri)) if value
    ]
    if args.tasks_only and asset_filter:
        raise SystemExit(f"--tasks-only exports no asset state; leave out {', '.join(asset_filter)}")
    if args.assets_only and task_filter:
        raise SystemExit(f"--assets-only exports no task state; leave out {', '.join(task_filter)}")
    with_tasks = not args.assets_only and (bool(task_filter) or not asset_filter)
    with_assets = not args.tasks_only and (bool(asset_filter) or not task_filter)
    return with_tasks, with_assets


@contextmanager
def _destination(path: str | None) -> Iterator[TextIO]:
    """stdout, or *path* through a file beside it renamed at the end: a failed export leaves no half file."""
    if path is None:
        yield sys.stdout
        return
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as out:
            yield out
        os.replace(partial, path)
    except OSError as error:
        raise SystemExit(f"cannot write {path}: {error.strerror}") from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _write_rows(out: TextIO, owner: TaskScope | manage.AssetInfo) -> int:
    """Every key of a task instance or an asset, a page at a time; how many there were."""
    scope = owner if isinstance(owner, TaskScope) else AssetScope(owner.asset_id)
    offset = 0
    while True:
        page, total = manage.entries(scope, offset=offset, limit=ENTRY_PAGE)
        out.writelines(dump_row(export_row(owner, entry)) + "\n" for entry in page)
        offset += len(page)
        if not page or offset >= total:
            return offset


def _task_scopes_with_state(args: Namespace, tally: _Tally, progress: Progress) -> Iterator[TaskScope]:
    """The task instances that hold state in the runs the filters name, run by run (in order of ids)."""
    for run_dag_id, run_run_id in dag_runs(args.dag_id, args.run_id, page_size=RUN_PAGE):
        tally.runs += 1
        progress.show(f"Exporting: {tally}")
        with create_session() as session:
            try:
                holding = manage.task_instances_with_state(run_dag_id, run_run_id, session)
            except manage.NotFound:
                continue  # deleted since it was listed: its state went with it
        yield from (ti.scope for ti in holding)


def _assets_with_state(args: Namespace) -> list[manage.AssetInfo]:
    """The assets holding state, only those the filters name; a filter that names none is an error."""
    with create_session() as session:
        named = None
        if args.asset_name is not None or args.asset_uri is not None:
            matching = matching_assets(session, name=args.asset_name, uri=args.asset_uri)
            named = {asset.asset_id for asset in matching}
        holding = manage.assets_with_state(session)
    return [asset for asset, _ in holding if named is None or asset.asset_id in named]
