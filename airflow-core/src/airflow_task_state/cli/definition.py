"""
``airflow state`` and ``airflow state-db`` (the downgrade `airflow db downgrade` does not offer
external managers), the provider's CLI hook (``"cli"`` in ``provider_info``).

Airflow imports this module during provider discovery, while it is still initialising: it imports
only ``airflow.cli.cli_config``, and the commands are imported when run (``_imported_when_run``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from airflow.cli.cli_config import (
    ARG_OUTPUT,
    ARG_VERBOSE,
    ARG_YES,
    ActionCommand,
    Arg,
    GroupCommand,
)

#: Airflow's map_index and asset id columns are 32-bit: a larger number names nothing, and SQLite
#: cannot even compare with it. Offsets and limits get the same bound.
LARGEST_INTEGER = 2**31 - 1
#: Versions and counters are 64-bit (airflow_shared.state.writes.MAX_COUNTER).
LARGEST_COUNTER = 2**63 - 1


def _number(
    flag: str, help: str, low: int, high: int = LARGEST_INTEGER, *, range_text: str = "", **kwargs: Any
) -> Arg:
    """An option taking an integer from *low* to *high*; anything else is refused naming the range."""
    in_range = range_text or f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, not {text!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{flag} must be {in_range}, not {number}")
        return number

    return Arg((flag,), help=help, type=parse, **{"metavar": "N", **kwargs})


def _flag(*flags: str, help: str) -> Arg:
    return Arg(flags, help=help, action="store_true")


ARG_DAG_ID = Arg(("--dag-id",), help="Task state: the DAG of the task instance", metavar="DAG_ID")
ARG_RUN_ID = Arg(("--run-id",), help="Task state: the run of the task instance", metavar="RUN_ID")
ARG_TASK_ID = Arg(("--task-id",), help="Task state: the task of the task instance", metavar="TASK_ID")
ARG_MAP_INDEX = _number(
    "--map-index",
    "Task state: the map index of a mapped task instance (default: -1, not mapped)",
    -1,
    metavar="INDEX",
)
ARG_ASSET_NAME = Arg(("--asset-name",), help="Asset state: the asset's name", metavar="NAME")
ARG_ASSET_URI = Arg(("--asset-uri",), help="Asset state: the asset's URI", metavar="URI")
ARG_ASSET_ID = _number("--asset-id", "Asset state: the asset's id", 1, metavar="ID")
SCOPE_ARGS = (ARG_DAG_ID, ARG_RUN_ID, ARG_TASK_ID, ARG_MAP_INDEX, ARG_ASSET_NAME, ARG_ASSET_URI, ARG_ASSET_ID)

ARG_KEY = Arg(("key",), help="The state key", metavar="KEY")
ARG_VALUE = Arg(
    ("value",),
    help="The value, as JSON: 42, true, '{\"id\": 1}', '[1, 2]'; a string needs JSON quotes: '\"text\"'",
    metavar="VALUE",
)
ARG_TTL = Arg(
    ("--ttl",),
    help=(
        "How long the key lives from this write: a duration (90s, 30m, 12h, 7d, 2w; a bare number is "
        "seconds) or 'never' (default: \\[state] default_task_retention for task state, never for "
        "asset state)"
    ),
    metavar="DURATION|never",
)
ARG_IF_VERSION = _number(
    "--if-version",
    "Write only if the key is still at this version (see `get`); 0: only if it does not exist. "
    "Otherwise nothing is written and the command exits 1 naming the stored version",
    0,
    LARGEST_COUNTER,
    range_text=f"0 (the key must be absent) or a version from 1 to {LARGEST_COUNTER}",
)
ARG_BY = _number(
    "--by",
    "What to add (default: 1; negative to subtract)",
    -LARGEST_COUNTER - 1,
    LARGEST_COUNTER,
    range_text="a 64-bit integer",
    default=1,
)
ARG_FETCH_TO = Arg(
    ("--fetch-to",),
    help="For a large value (its value is a reference to object storage): stream its object to this "
    "file, checked against its digest, instead of printing the entry ('-': stdout). Needs "
    "\\[state] object_storage_path and the storage's credentials here",
    metavar="PATH",
)
ARG_KEY_PREFIX = Arg(("--key-prefix",), help="Only keys that start with this text", metavar="PREFIX")
ARG_LIMIT = _number("--limit", "At most this many keys (default: all)", 1)
ARG_OFFSET = _number("--offset", "Skip this many keys first, in key order (default: 0)", 0, default=0)
ARG_ALL_MAP_INDICES = _flag(
    "--all-map-indices", help="Clear the state of every map index of the task, not of one task instance"
)

ARG_EXPORT_FILE = Arg(("--file",), help="Write to this file instead of stdout ('-': stdout)", metavar="PATH")
ARG_EXPORT_DAG_ID = Arg(("--dag-id",), help="Only the task state of this DAG's runs", metavar="DAG_ID")
ARG_EXPORT_RUN_ID = Arg(("--run-id",), help="Only the task state of runs with this run id", metavar="RUN_ID")
ARG_EXPORT_ASSET_NAME = Arg(
    ("--asset-name",), help="Only the state of the asset(s) with this name", metavar="NAME"
)
ARG_EXPORT_ASSET_URI = Arg(("--asset-uri",), help="Only the state of the asset with this URI", metavar="URI")
EXPORT_FILTERS = (ARG_EXPORT_DAG_ID, ARG_EXPORT_RUN_ID, ARG_EXPORT_ASSET_NAME, ARG_EXPORT_ASSET_URI)
ARG_TASKS_ONLY = _flag("--tasks-only", help="Only task state, no asset state")
ARG_ASSETS_ONLY = _flag("--assets-only", help="Only asset state, no task state")
ARG_IMPORT_FILE = Arg(
    ("file",), help="The file to import, as written by `export` ('-': stdin)", metavar="FILE"
)
ARG_DRY_RUN = _flag("--dry-run", help="Check every row and print what would be written; write nothing")
ARG_ACTION_ON_EXISTING_KEY = Arg(
    ("-a", "--action-on-existing-key"),
    help=(
        "What to do with keys that already exist: overwrite them (asks first, unless -y), "
        "fail (import nothing) or skip them (default: overwrite)"
    ),
    choices=("overwrite", "fail", "skip"),
    default="overwrite",
)

ARG_CLEAN_DRY_RUN = _flag("--dry-run", help="Count the keys that would be removed; remove nothing")
ARG_BATCH_SIZE = _number(
    "--batch-size", "Remove at most this many keys per transaction (default: 1000)", 1, default=1000
)
ARG_OLDER_THAN = Arg(
    ("--older-than",),
    help=(
        "Also remove keys last written before this: a duration back from now (30d, 12h, 2w) or an "
        "ISO 8601 timestamp (2026-01-31, 2026-01-31T12:00:00+02:00; UTC when no offset is given)"
    ),
    metavar="DURATION|TIMESTAMP",
)
ARG_CLEARED = _flag(
    "--cleared",
    help=(
        "Also remove the keys that clears left for each task instance's next try to discard (hidden "
        "from operators already). Reads the try history of every retried or cleared task instance: "
        "run it before upgrading to Airflow 3.3, not from cron"
    ),
)

# Help texts go through rich_argparse, which reads "[...]" as markup: "\\[" keeps the bracket.
SCOPE_HELP = (
    "Commands work on the state of one task instance (--dag-id, --run-id, --task-id, and --map-index "
    "for a mapped one) or of one asset (--asset-name, --asset-uri or --asset-id), on the backend set "
    "by \\[state] backend. Values are JSON. Writes made here record no try (updated_by_try is empty); "
    "asset state records them as written by 'cli'."
)


def _imported_when_run(import_path: str) -> Callable[[argparse.Namespace], None]:
    """
    The command at *import_path*, imported when it runs, as ``lazy_load_command`` would, but with
    logs and warnings held back during the import unless ``--verbose`` (as reads hold them back
    while they run): importing Airflow's models can log, and Airflow logs to stdout, where what a
    command prints for scripts (``-o json``, ``export``, ``increment``) must stand alone.
    """
    module, _, name = import_path.rpartition(".")

    def run(args: argparse.Namespace) -> None:
        from airflow.utils.cli import suppress_logs_and_warning

        @suppress_logs_and_warning
        def load(_: argparse.Namespace) -> None:
            importlib.import_module(module)

        load(argparse.Namespace(verbose=getattr(args, "verbose", False)))
        getattr(sys.modules[module], name)(args)

    run.__name__ = name
    return run


def _command(name: str, function: str, help: str, args: tuple[Arg, ...], description: str) -> ActionCommand:
    return ActionCommand(
        name=name,
        help=help,
        # The commands that name one task instance or asset say how; export and import do not.
        description=f"{description}\n\n{SCOPE_HELP}" if ARG_DAG_ID in args else description,
        # Imported when run, not here: Airflow reads this module while it starts (see above).
        func=_imported_when_run(f"airflow_task_state.cli.{function}"),
        args=args,
    )


STATE_COMMANDS = (
    _command(
        "get",
        "state_commands.get",
        "Print the value stored under a key",
        (ARG_KEY, *SCOPE_ARGS, ARG_OUTPUT, ARG_FETCH_TO, ARG_VERBOSE),
        "Print one key's value, its version, when it was written and expires, and who wrote it (task "
        "state: the try; asset state: the task instance, 'api' or 'cli'). Exits 1 when the key is not "
        "set (an expired key is not set). json and yaml show the value as it is; table and plain as "
        "JSON text. A large value shows as its reference (size, digest, path); --fetch-to reads it.",
    ),
    _command(
        "set",
        "state_commands.set_value",
        "Store a value under a key",
        (ARG_KEY, ARG_VALUE, *SCOPE_ARGS, ARG_TTL, ARG_IF_VERSION, ARG_VERBOSE),
        "Store VALUE (JSON, not null, at most \\[state] max_value_bytes) under KEY, replacing any "
        "value there, and print the key's new version. "
        "Example: airflow state set job_id '\"app_001\"' --dag-id d --run-id r --task-id t --ttl 7d",
    ),
    _command(
        "increment",
        "state_commands.increment",
        "Add to the integer stored under a key, atomically",
        (ARG_KEY, *SCOPE_ARGS, ARG_BY, ARG_TTL, ARG_VERBOSE),
        "Add --by (default 1) to the JSON integer stored under KEY (a key that is not set counts as "
        "0) in one atomic step, and print the new value. Exits 1, writing nothing, when the key holds "
        "anything but an integer or the result leaves the 64-bit range.",
    ),
    _command(
        "delete",
        "state_commands.delete",
        "Delete one key",
        (ARG_KEY, *SCOPE_ARGS, ARG_YES, ARG_VERBOSE),
        "Delete KEY; asks first unless -y. Exits 1 when the key is not set.",
    ),
    _command(
        "list",
        "state_commands.list_entries",
        "List keys with their values",
        (*SCOPE_ARGS, ARG_KEY_PREFIX, ARG_LIMIT, ARG_OFFSET, ARG_OUTPUT, ARG_VERBOSE),
        "List the keys (sorted by code point) with their values, versions, when they were written and "
        "expire, and who wrote them (task state: the try; asset state: the writer). Expired keys are "
        "not listed. With --limit/--offset, which keys of how many is said on stderr.",
    ),
    _command(
        "clear",
        "state_commands.clear",
        "Delete every key of a task instance or an asset",
        (*SCOPE_ARGS, ARG_ALL_MAP_INDICES, ARG_YES, ARG_VERBOSE),
        "Delete every key of the task instance or asset; asks first unless -y. With "
        "--all-map-indices (and no --map-index), every map index of the task in that run.",
    ),
    _command(
        "clean",
        "clean_command.clean",
        "Remove expired keys for good (and, with --older-than, keys not written since)",
        (ARG_CLEAN_DRY_RUN, ARG_BATCH_SIZE, ARG_OLDER_THAN, ARG_CLEARED, ARG_YES, ARG_VERBOSE),
        "Physically remove every expired key, task and asset state alike, on the configured backend "
        "(expired keys are already invisible to every read: this reclaims their space), and with "
        "--older-than also every key last written before then; with --cleared also the keys a clear "
        "left for a task instance's next try to discard. Works in batches of "
        "--batch-size keys, each its own short transaction, so tasks keep reading and writing "
        "meanwhile. With \\[state] object_storage_path set, then also removes the objects of large "
        "values no key references, older than \\[state] object_grace_period. Asks first "
        "unless -y; --dry-run only counts. Run it from cron or a DAG, as `airflow db clean`.",
    ),
    _command(
        "export",
        "export_command.export_state",
        "Write stored state as JSON lines",
        (ARG_EXPORT_FILE, *EXPORT_FILTERS, ARG_TASKS_ONLY, ARG_ASSETS_ONLY, ARG_VERBOSE),
        "Write every stored key as one JSON object per line, for `airflow state import` here or in "
        "another deployment (or on another backend): task state as {scope: task, dag_id, run_id, "
        "task_id, map_index, key, value, updated_at, updated_by_try, expires_at}, asset state as {scope: "
        "asset, asset_name, asset_uri, key, value, updated_at, expires_at, updated_by}. Expired keys "
        "are not exported; versions are not (they are the target's). Filters say what to export: "
        "with only --dag-id/--run-id no asset state, with only --asset-name/--asset-uri no task state.",
    ),
    _command(
        "import",
        "import_command.import_state",
        "Store the state of an export file",
        (ARG_IMPORT_FILE, ARG_ACTION_ON_EXISTING_KEY, ARG_DRY_RUN, ARG_YES, ARG_VERBOSE),
        "Store every row of FILE (written by `airflow state export`). Every row is checked first: "
        "valid JSON, fields, key and value, and its dag run, task instance or asset must exist here "
        "(assets are found by name and URI). If any row is refused, the refusals are listed with "
        "their line numbers and nothing is written. Rows keep the try that wrote them "
        "(updated_by_try), the writer of asset state (updated_by) and when they expire (expires_at); "
        "a row already expired is skipped and counted. updated_at becomes the time of the import, "
        "and versions restart (a new key is at version 1). Files exported before expiry existed "
        "import as never expiring. On the metastore the import is one transaction.",
    ),
)

STATE_GROUP = GroupCommand(
    name="state",
    help="Read and change task and asset state",
    description=(
        "Read, change, export and import durable task and asset state (AIP-103) on the configured "
        "backend. " + SCOPE_HELP
    ),
    subcommands=STATE_COMMANDS,
)


ARG_TO_REVISION = Arg(
    ("-r", "--to-revision"),
    help="The revision to downgrade to; 'base' drops the task_state and asset_state tables",
    required=True,
)
ARG_FROM_REVISION = Arg(("--from-revision",), help="With --show-sql-only: the revision to start from")
ARG_SHOW_SQL_ONLY = _flag("-s", "--show-sql-only", help="Print the SQL instead of running it")

STATE_DB_GROUP = GroupCommand(
    name="state-db",
    help="Manage the task and asset state tables",
    subcommands=(
        _command(
            "downgrade",
            "commands.downgrade",
            "Downgrade the task and asset state tables",
            (ARG_TO_REVISION, ARG_FROM_REVISION, ARG_SHOW_SQL_ONLY, ARG_YES),
            "Downgrade the schema of the task_state and asset_state tables. "
            "`--to-revision base` drops both tables and every stored value.",
        ),
    ),
)


def get_state_cli_commands() -> list[GroupCommand]:
    return [STATE_GROUP, STATE_DB_GROUP]
