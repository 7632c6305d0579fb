"""``airflow state-db downgrade``: the metastore's tables, downgraded as ``airflow db downgrade`` would."""

from __future__ import annotations

from airflow.utils.providers_configuration_loader import providers_configuration_loaded
from airflow.utils.session import create_session

from airflow_task_state.cli.unreachable import one_line_when_unreachable
from airflow_task_state.metastore.db_manager import StateDBManager


@providers_configuration_loaded
def downgrade(args) -> None:
    if args.from_revision and not args.show_sql_only:
        raise SystemExit("--from-revision is only used with --show-sql-only")
    if not (args.show_sql_only or args.yes):
        answer = input(
            f"This downgrades the task and asset state tables to {args.to_revision!r}"
            f"{' and deletes all stored state' if args.to_revision == 'base' else ''}. Proceed? (y/n) "
        )
        if answer.strip().upper() != "Y":
            raise SystemExit("Cancelled")
    with one_line_when_unreachable(), create_session() as session:
        StateDBManager(session).downgrade(
            to_revision=args.to_revision, from_revision=args.from_revision, show_sql_only=args.show_sql_only
        )
    if not args.show_sql_only:
        print(f"Downgraded the task and asset state tables to {args.to_revision}")
