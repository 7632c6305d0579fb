"""
``airflow state import``, as its help says. The file is read twice (check, then write) rather than
held in memory; stdin is spooled to a temporary file for that.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
from argparse import Namespace
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO

from airflow._shared.timezones.timezone import utcnow
from airflow.utils.session import create_session
from airflow_shared.state import BaseStateBackend, StateScope, TaskScope
from sqlalchemy.orm import Session

from airflow_task_state import manage
from airflow_task_state.cli.errors import command, configured_backend, confirm
from airflow_task_state.cli.formats import AssetTarget, RowError, count, parse_row, relocated
from airflow_task_state.cli.progress import Progress
from airflow_task_state.cli.scope_options import NamedScope, asset, task_instance
from airflow_task_state.configured_backend import unwrap_state_backend

#: Refusals listed before "... and N more": enough to see the pattern, not a flood.
SHOWN_REFUSALS = 50

#: What happens to a valid row: written, written over a key that exists, skipped because its key
#: exists (``-a skip``), or skipped because it had expired by the time of the check.
WRITE, OVERWRITE, EXISTS, EXPIRED = "write", "overwrite", "exists", "expired"


@dataclass(frozen=True)
class Planned:
    """What the import does with one valid row."""

    line: int
    named: NamedScope
    key: str
    outcome: str
    expired_at: datetime | None = None


@dataclass
class Plan:
    """Every valid row with what happens to it, and the refusals, after the first read."""

    rows: list[Planned] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    #: The discard a clear left pending on each task instance written to (``None``: none), which
    #: the check honours as operators' reads do and the write applies first (manage.py).
    pending_discards: dict[StateScope, int | None] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return sum(row.outcome == outcome for row in self.rows)

    @property
    def writes(self) -> list[Planned]:
        return [row for row in self.rows if row.outcome in (WRITE, OVERWRITE)]


@command(writes=True)
def import_state(args: Namespace) -> None:
    backend = configured_backend()
    progress = Progress()
    with _spooled(args.file) as file:
        with progress:
            plan = _plan(file, backend, args.action_on_existing_key, progress)
        if plan.refusals:
            for refusal in plan.refusals[:SHOWN_REFUSALS]:
                print(refusal, file=sys.stderr)
            if len(plan.refusals) > SHOWN_REFUSALS:
                print(f"... and {len(plan.refusals) - SHOWN_REFUSALS} more", file=sys.stderr)
            rows = count(len(plan.refusals) + len(plan.rows), "row")
            dry_run = " (dry run)" if args.dry_run else ""
            raise SystemExit(f"refused {len(plan.refusals)} of {rows}; nothing was imported{dry_run}")
        if args.dry_run:
            _report_dry_run(plan)
            return
        _confirm_overwriting(plan, args)
        with progress:
            _write(file, backend, plan, progress)
    overwritten, exists, expired = plan.count(OVERWRITE), plan.count(EXISTS), plan.count(EXPIRED)
    print(
        f"Imported {count(len(plan.writes), 'key')} ({len(plan.writes) - overwritten} new, "
        f"{overwritten} overwritten){f', skipped {exists} that already exist' if exists else ''}"
        f"{f', skipped {expired} already expired' if expired else ''}"
    )


def _confirm_overwriting(plan: Plan, args: Namespace) -> None:
    overwrites = plan.count(OVERWRITE)
    if not overwrites or args.yes:
        return
    existing = f"{count(overwrites, 'key')} already {'exists' if overwrites == 1 else 'exist'}"
    if args.file == "-":
        raise SystemExit(
            f"{existing}; the rows come from stdin, so there is no one to ask: "
            "pass -y to overwrite them, or -a skip or -a fail"
        )
    importing = count(len(plan.writes), "key")
    question = f"Importing {importing}: {existing} and will be overwritten. Proceed?"
    confirm(question, yes=False, cancelled="nothing was imported")


def _report_dry_run(plan: Plan) -> None:
    for row in plan.rows:
        verb = row.outcome if row.outcome in (WRITE, OVERWRITE) else "skip"
        why = "" if row.expired_at is None else f" (expired at {row.expired_at.isoformat()})"
        print(f"line {row.line}: would {verb} key {row.key!r} of {row.named.description}{why}")
    expired = plan.count(EXPIRED)
    print(
        f"Dry run: would import {count(len(plan.writes), 'key')} ({plan.count(OVERWRITE)} overwritten), "
        f"skip {plan.count(EXISTS) + expired}{f' ({expired} expired)' if expired else ''}; "
        "nothing was written"
    )


@contextmanager
def _spooled(path: str) -> Iterator[IO[bytes]]:
    """The file at *path*, or stdin (``-``) spooled to a temporary file, to be read twice."""
    try:
        file = tempfile.TemporaryFile() if path == "-" else open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as error:
        raise SystemExit(f"cannot read {path}: {error.strerror}") from None
    with file:
        if path == "-":
            shutil.copyfileobj(sys.stdin.buffer, file)
        yield file


def _decoded(file: IO[bytes]) -> Iterator[tuple[int, str | None]]:
    """
    *file* from the start: ``(line number, text)``, the text ``None`` for a line that is not UTF-8.
    Split on ``\\n`` only (JSON escapes it in strings): a raw U+2028 in a string is no line break.
    """
    file.seek(0)
    for number, raw in enumerate(file, start=1):
        try:
            # utf-8-sig on the first line: a byte-order mark is not part of the first row.
            yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            yield number, None


def _lines(file: IO[bytes], progress: Progress) -> int:
    """How many lines *file* has, for "N/total" (a quick read of bytes): only when progress shows."""
    if not progress.enabled:
        return 0
    file.seek(0)
    return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))


def _plan(file: IO[bytes], backend: BaseStateBackend, action: str, progress: Progress) -> Plan:
    """Check every row in order, remembering what each target resolved to and each key's first line."""
    plan = Plan()
    resolved: dict[TaskScope | AssetTarget, NamedScope | str] = {}
    first_line_of: dict[tuple[StateScope, str], int] = {}
    now = utcnow()  # what "already expired" is measured against: the start of the import

    def check(number: int, text: str | None, session: Session) -> str | None:
        """What is wrong with the row on line *number*, or ``None`` after adding it to the plan."""
        if text is None:
            return "not UTF-8 text"
        try:
            row = parse_row(text)
        except RowError as error:
            return str(error)
        target = row.target
        if target not in resolved:
            try:
                resolved[target] = (
                    task_instance(target.dag_id, target.run_id, target.task_id, target.map_index, session)
                    if isinstance(target, TaskScope)
                    else asset(session, name=target.name, uri=target.uri)
                )
            except manage.NotFound as missing:
                resolved[target] = missing.message
        found = resolved[target]
        if isinstance(found, str):
            return found
        earlier = first_line_of.setdefault((found.scope, row.key), number)
        if earlier != number:
            return f"key {row.key!r} of {found.description} is also on line {earlier}"
        planned = functools.partial(Planned, number, found, row.key)
        if row.expires_at is not None:
            if row.expires_at <= now:
                plan.rows.append(planned(EXPIRED, row.expires_at))
                return None
            if not backend.supports_expiry:
                name = type(unwrap_state_backend(backend)).__name__
                return (
                    f"key {row.key!r} expires at {row.expires_at.isoformat()}, and {name} does not "
                    'support expiry: import into a backend that does, or set "expires_at" to null '
                    "(never) in the file"
                )
        if found.scope not in plan.pending_discards:
            plan.pending_discards[found.scope] = manage.pending_discard(found.scope)
        if not manage.holds(found.scope, row.key, plan.pending_discards[found.scope]):
            plan.rows.append(planned(WRITE))
        elif action == "fail":
            return f"key {row.key!r} of {found.description} already exists (-a fail)"
        else:
            plan.rows.append(planned(EXISTS if action == "skip" else OVERWRITE))
        return None

    total = _lines(file, progress)
    number = 0
    with create_session() as session:
        for number, text in _decoded(file):
            # Blank lines (a trailing newline, a hand-edited file) are not rows.
            problem = None if text is not None and not text.strip() else check(number, text, session)
            if problem:
                plan.refusals.append(f"line {number}: {problem}")
            progress.show(f"Checking: line {number}/{max(total, number)}")
    progress.done(f"Checking: line {number}/{max(total, number)}, {count(len(plan.refusals), 'refusal')}")
    return plan


def _write(file: IO[bytes], backend: BaseStateBackend, plan: Plan, progress: Progress) -> None:
    """
    Write the planned rows, reading their values from the file again, each task instance's pending
    discard applied first. One session: the metastore joins it, so its writes commit together or
    not at all; other backends write as they go.
    """
    writes = plan.writes
    planned = {row.line: row for row in writes}
    written = 0
    number = 0
    try:
        with create_session() as session:
            for scope in dict.fromkeys(row.named.scope for row in writes):
                manage.settle_pending_discard(scope, plan.pending_discards[scope], session=session)
            for number, text in _decoded(file):
                row = planned.get(number)
                if row is None or text is None:
                    continue
                parsed = parse_row(text)  # checked in the first pass: parses the same way again
                backend.write(
                    row.named.scope,
                    row.key,
                    relocated(parsed.value_text),  # a large value: a copy of its object
                    writer=parsed.writer,
                    expires_at=parsed.expires_at,
                    session=session,
                )
                written += 1
                progress.show(f"Writing: {written}/{count(len(writes), 'key')}")
        progress.done(f"Writing: {written}/{count(len(writes), 'key')}")
    except Exception as error:
        kept = (
            "nothing was imported"
            if backend.supports_session_transactions
            else f"the {count(written, 'key')} written before it stay"
        )
        # The first line only: a database error goes on with the statement and its parameters.
        reason = (str(error).splitlines() or [""])[0]
        raise SystemExit(f"line {number}: writing failed: {type(error).__name__}: {reason}; {kept}") from None
