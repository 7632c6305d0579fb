"""
The command groups this distribution adds to the `airflow` CLI, returned by the provider's CLI hook
(``"cli"`` in ``provider_info``): ``airflow state`` (see :mod:`.state_definition`) and
``airflow state-db``, the downgrade path `airflow db downgrade` does not offer external managers.
"""

from __future__ import annotations

from airflow.cli.cli_config import ARG_YES, ActionCommand, Arg, GroupCommand, lazy_load_command
from airflow.state.cli.state_definition import STATE_GROUP

ARG_TO_REVISION = Arg(
    ("-r", "--to-revision"),
    help="The revision to downgrade to; 'base' drops the task_state and asset_state tables",
    required=True,
)
ARG_FROM_REVISION = Arg(("--from-revision",), help="With --show-sql-only: the revision to start from")
ARG_SHOW_SQL_ONLY = Arg(
    ("-s", "--show-sql-only"), help="Print the SQL instead of running it", action="store_true"
)

STATE_DB_GROUP = GroupCommand(
    name="state-db",
    help="Manage the task and asset state tables",
    subcommands=(
        ActionCommand(
            name="downgrade",
            help="Downgrade the task and asset state tables",
            description=(
                "Downgrade the schema of the task_state and asset_state tables. "
                "`--to-revision base` drops both tables and every stored value."
            ),
            func=lazy_load_command("airflow.state.cli.commands.downgrade"),
            args=(ARG_TO_REVISION, ARG_FROM_REVISION, ARG_SHOW_SQL_ONLY, ARG_YES),
        ),
    ),
)


def get_state_cli_commands() -> list[GroupCommand]:
    return [STATE_GROUP, STATE_DB_GROUP]
