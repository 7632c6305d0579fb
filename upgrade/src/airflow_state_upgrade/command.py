"""
``airflow-state-upgrade``: move airflow-task-state's state into Airflow 3.3's built-in store.

Steps, exit status and what moves: airflow-task-state's documentation, "Upgrading to Airflow 3.3"
(docs/upgrading.md).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from airflow import settings
from airflow.configuration import conf

from .move import Mover, active_asset_ids, table_moves
from .report import Report
from .tables import CannotStart, drop_our_tables, find_tables, record_completed_move


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-state-upgrade",
        description="Copy airflow-task-state's task_state and asset_state rows into Airflow 3.3's "
        "task_state_store and asset_state_store. Run it with Airflow 3.3 installed, after "
        "`airflow db migrate`. Running it again changes nothing.",
    )
    parser.add_argument("--dry-run", action="store_true", help="Say what would move, and change nothing.")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace values that Airflow 3.3's store already holds for the same key with ours "
        "(by default they are kept and reported as conflicts).",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=5000,
        help="Rows per transaction (default %(default)s).",
    )
    parser.add_argument(
        "--drop-old-tables",
        action="store_true",
        help="After a complete move, drop task_state, asset_state and alembic_version_state. "
        "Refused when any row did not move.",
    )
    parser.add_argument("-y", "--yes", action="store_true", help="Do not ask before dropping tables.")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="The summary as a table (default) or as one JSON document.",
    )
    return parser


def _confirmed(names: str) -> bool:
    # The question goes to stderr: stdout carries only the summary (one JSON document with -o json).
    question = f"Drop {names}? Every live row of them is in Airflow 3.3's store. [y/N] "
    print(question, end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:  # no terminal to ask (cron, CI): only -y drops
        return False
    return answer.strip().lower() in ("y", "yes")


def run(args: argparse.Namespace) -> int:
    if settings.engine is None:  # Airflow's own engine: its configuration, connection settings, time zone
        settings.configure_orm()
    engine: Any = settings.engine
    print(f"Database: {engine.url.render_as_string(hide_password=True)}", file=sys.stderr)
    tables = find_tables(engine)
    report = Report(dry_run=args.dry_run, overwrite=args.overwrite, moved_at=tables.moved_at)
    moves = table_moves(tables)
    if not moves:
        nothing = "Nothing to move: this database has no task_state or asset_state table (dropped already?)."
        # With -o json, stdout carries one JSON document whatever happens: scripts parse it.
        print(report.as_json() if args.output == "json" else nothing)
        if args.output == "json":
            print(nothing, file=sys.stderr)
        return 0
    now = datetime.now(UTC)
    mover = Mover(
        engine=engine,
        report=report,
        now=now,
        batch_size=args.batch_size,
        progress=lambda table, read, total: print(f"{table}: {read}/{total} rows read", file=sys.stderr),
        active_assets=active_asset_ids(engine),
        value_limit=conf.getint("state_store", "max_value_storage_bytes", fallback=0),
    )
    for move in moves:
        mover.run(move)
    if report.complete and not args.dry_run and tables.moved_at is None:
        record_completed_move(engine, now)

    refusal = None
    if args.drop_old_tables:
        if not report.complete:
            refusal = (
                "Not dropping the old tables: some rows are not in Airflow 3.3's store with our value "
                "(listed above). Resolve them (--overwrite for conflicts) and run again."
            )
        elif args.dry_run:
            refusal = "Dry run: task_state, asset_state and alembic_version_state would be dropped."
        elif args.yes or _confirmed("task_state, asset_state and alembic_version_state"):
            report.dropped = drop_our_tables(engine)
        else:
            refusal = "Not dropping the old tables: not confirmed (-y drops without asking)."
    print(report.as_json() if args.output == "json" else report.as_table())
    if refusal:
        print(refusal, file=sys.stderr)
    # A drop asked for and not done (but a dry run's) fails: a script must not go on as if it were.
    drop_refused = args.drop_old_tables and not args.dry_run and not report.dropped
    return 1 if drop_refused or not report.complete else 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"argument --batch-size: must be at least 1, got {args.batch_size}")
    try:
        return run(args)
    except CannotStart as error:
        print(f"airflow-state-upgrade: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
