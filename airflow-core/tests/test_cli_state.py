"""
`airflow state get|set|delete|list|clear`, through Airflow's real CLI parser in this process (and
once as a real `airflow` process), against real dag runs, task instances and assets in the
database of the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import yaml
from airflow._shared.timezones.timezone import utcnow
from airflow.utils.session import create_session
from airflow_shared.state import AssetScope, BaseStateBackend, StateWriter
from airflow_shared.state._memory import MemoryStateBackend
from airflow_task_state import get_state_backend, manage, task_scope
from airflow_task_state.cli.definition import STATE_COMMANDS
from airflow_task_state.configured_backend import reset_state_backend
from state_testing.airflow_cli import run_airflow

# --- fixtures and helpers ---------------------------------------------------------------------------


@pytest.fixture
def ti(unique, make_task_instances) -> list[str]:
    """The options naming a real, unmapped task instance (its run also has a task mapped over 0..2)."""
    dag_id, run_id = f"cli_{unique}", "manual__run"
    make_task_instances(dag_id, run_id, ("extract", -1), ("mapped", 0), ("mapped", 1), ("mapped", 2))
    return ["--dag-id", dag_id, "--run-id", run_id, "--task-id", "extract"]


def mapped(ti: list[str], index: int) -> list[str]:
    return [*ti[:-1], "mapped", "--map-index", str(index)]


@pytest.fixture
def asset(make_asset, unique) -> dict[str, str]:
    asset_id = make_asset(1)
    return {"id": str(asset_id), "name": f"state_{unique}_1", "uri": f"s3://state-tests/{unique}/1"}


def state_of(scope_args: list[str], cli) -> dict:
    """Every key of the scope with its value, read through `list -o json`."""
    return {row["key"]: row["value"] for row in json.loads(cli("list", *scope_args, "-o", "json"))}


# --- set and get --------------------------------------------------------------------------------

VALUES = {
    "int": 42,
    "float": 2.5,
    "string": "app_001",
    "numeric_string": "3",
    "bool": True,
    "list": [1, "two", None, {"three": 3}],
    "dict": {"id": "app_001", "attempts": [1, 2], "nested": {"ok": False}},
    "unicode": "Zürich ✓ 東京",
}


def test_set_then_get_keeps_the_json_type_in_json_and_yaml(cli, ti):
    for key, value in VALUES.items():
        stored = cli("set", key, json.dumps(value), *ti)
        assert stored.startswith(f"Stored key {key!r} of task instance (")
    for key, value in VALUES.items():
        [as_json] = json.loads(cli("get", key, *ti, "-o", "json", "--verbose"))
        assert as_json["key"] == key and as_json["value"] == value
        assert type(as_json["value"]) is type(value)
        [as_yaml] = yaml.safe_load(cli("get", key, *ti, "-o", "yaml"))
        assert as_yaml["value"] == value and type(as_yaml["value"]) is type(value)


def test_table_and_plain_show_values_as_json_text(cli, ti):
    cli("set", "numeric_string", '"3"', *ti)
    cli("set", "number", "3", *ti)
    cli("set", "dict", '{"a": [1, true]}', *ti)
    cli("set", "markup", '"[red]x[/red] :smile:"', *ti)
    for output in ("table", "plain"):
        shown = cli("get", "numeric_string", *ti, "-o", output)
        assert '"3"' in shown
        shown = cli("get", "number", *ti, "-o", output)
        assert "3" in shown and '"3"' not in shown
        shown = cli("get", "dict", *ti, "-o", output)
        assert '{"a": [1, true]}' in shown  # JSON, not the Python repr {'a': [1, True]}
        # Keys and values are data: never rich markup or emoji codes.
        assert '"[red]x[/red] :smile:"' in cli("get", "markup", *ti, "-o", output)
    listed = cli("list", *ti)  # table is the default
    for header in ("key", "value", "updated_at", "updated_by_try"):
        assert header in listed.splitlines()[0]


def test_get_reports_when_and_by_which_try_and_cli_writes_name_no_try(cli, ti):
    dag_id, run_id, task_id = ti[1], ti[3], ti[5]
    get_state_backend().set_by_try(task_scope(dag_id, run_id, task_id), "by_task", '"t"', try_number=3)
    [written_by_task] = json.loads(cli("get", "by_task", *ti, "-o", "json"))
    assert written_by_task["updated_by_try"] == 3
    assert written_by_task["updated_at"]  # ISO 8601, from the metastore
    cli("set", "by_task", '"overwritten by an operator"', *ti)
    [written_by_cli] = json.loads(cli("get", "by_task", *ti, "-o", "json"))
    assert written_by_cli["updated_by_try"] is None
    assert written_by_cli["value"] == "overwritten by an operator"


def test_get_of_a_missing_key_exits_1(refused, ti, asset):
    assert refused("get", "nope", *ti) == "no state stored under key 'nope'"
    assert refused("get", "nope", "--asset-id", asset["id"]) == "no state stored under key 'nope'"


def test_a_value_that_is_not_json_says_to_quote_strings(refused, cli, ti):
    message = refused("set", "k", "app_001", *ti)
    assert message.startswith("invalid value: the value must be JSON (a string needs quotes")
    assert refused("set", "k", "{bad", *ti).startswith("invalid value: the value must be JSON")
    assert state_of(ti, cli) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("null", "invalid value: state values cannot be None; to remove a key call delete()"),
        ("NaN", "invalid value: state values must be JSON; NaN and Infinity are not"),
        ("[Infinity]", "invalid value: state values must be JSON; NaN and Infinity are not"),
    ],
)
def test_values_json_cannot_carry_are_refused(refused, cli, ti, value, message):
    assert refused("set", "k", value, *ti).startswith(message)
    assert state_of(ti, cli) == {}


def test_an_oversize_value_is_refused_with_the_limit(refused, cli, ti, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__MAX_VALUE_BYTES", "100")
    cli("set", "fits", json.dumps("x" * 98), *ti)  # 100 bytes with its quotes
    message = refused("set", "too_big", json.dumps("x" * 99), *ti)
    assert (
        message
        == "invalid value: state value is 101 bytes as JSON; the limit is 100 ([state] max_value_bytes)"
    )
    assert set(state_of(ti, cli)) == {"fits"}


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "invalid key: state key must not be empty"),
        ("x" * 513, "invalid key: state key is 513 characters long; the limit is 512"),
        ("nul\x00key", "invalid key: state key must not contain NUL"),
    ],
)
def test_bad_keys_are_refused_by_every_command_that_takes_one(refused, cli, ti, key, message):
    for command in (["get", key], ["set", key, "1"], ["delete", key, "-y"]):
        assert refused(*command, *ti).startswith(message)
    assert state_of(ti, cli) == {}


def test_keys_are_any_text_up_to_512_characters(cli, ti):
    keys = ["a/b/c", "dots.in.key", "with spaces", "ünïcödé ✓", "x" * 512, "."]
    for key in keys:
        cli("set", key, json.dumps(key), *ti)
    # A key that looks like an option comes after "--", the options before it.
    cli("set", *ti, "--", "-dash", "-1")
    assert json.loads(cli("get", *ti, "-o", "json", "--", "-dash"))[0]["value"] == -1
    assert state_of(ti, cli) == {**{key: key for key in keys}, "-dash": -1}


# --- scopes -------------------------------------------------------------------------------------


def test_task_state_is_per_map_index(cli, ti):
    cli("set", "k", '"unmapped"', *ti)
    for index in (0, 1):
        cli("set", "k", json.dumps(f"index {index}"), *mapped(ti, index))
    assert state_of(ti, cli) == {"k": "unmapped"}
    assert state_of(mapped(ti, 0), cli) == {"k": "index 0"}
    assert state_of(mapped(ti, 1), cli) == {"k": "index 1"}
    assert state_of(mapped(ti, 2), cli) == {}
    assert "map_index=1" in cli("set", "other", "1", *mapped(ti, 1))


def test_an_asset_is_named_by_its_id_its_name_or_its_uri(cli, asset):
    assert cli("set", "watermark", '"2026-01-01"', "--asset-name", asset["name"]).startswith(
        f"Stored key 'watermark' of asset {asset['name']!r}"
    )
    for options in (
        ["--asset-id", asset["id"]],
        ["--asset-uri", asset["uri"]],
        ["--asset-name", asset["name"], "--asset-uri", asset["uri"]],
    ):
        [row] = json.loads(cli("get", "watermark", *options, "-o", "json"))
        assert row == {
            "key": "watermark",
            "value": "2026-01-01",
            "version": 1,
            "updated_at": row["updated_at"],
            "expires_at": None,  # asset state never expires unless asked
            "updated_by": {"kind": "cli"},
        }
        assert "updated_by_try" not in row  # asset state records no try
    assert "updated_by_try" not in cli("list", "--asset-id", asset["id"], "-o", "plain")


NEEDS_ALL_THREE = "task state needs --dag-id, --run-id and --task-id"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--dag-id", "d", "--asset-name", "a"],
            "give either a task instance or an asset, not both (--dag-id, --asset-name); "
            "see `airflow state --help`",
        ),
        (["--map-index", "0", "--asset-id", "1"], "give either a task instance or an asset, not both"),
        ([], "name the state: --dag-id, --run-id and --task-id"),
        (
            ["--dag-id", "d", "--run-id", "r"],
            "task state needs --dag-id, --run-id and --task-id; missing --task-id",
        ),
        (["--task-id", "t"], "task state needs --dag-id, --run-id and --task-id; missing --dag-id, --run-id"),
    ],
)
def test_scope_options_mixed_or_incomplete_are_refused(refused, options, message):
    for command in (["get", "k"], ["set", "k", "1"], ["delete", "k", "-y"], ["list"], ["clear", "-y"]):
        assert refused(*command, *options).startswith(message)


def test_missing_dag_run_task_instance_and_asset_are_named(refused, ti, unique):
    dag_id, run_id = ti[1], ti[3]
    no_run = ["--dag-id", dag_id, "--run-id", "nope", "--task-id", "extract"]
    no_ti = ["--dag-id", dag_id, "--run-id", run_id, "--task-id", "nope"]
    no_index = ["--dag-id", dag_id, "--run-id", run_id, "--task-id", "mapped", "--map-index", "7"]
    expected = [
        (no_run, f"no dag run with dag_id={dag_id!r} and run_id='nope'"),
        (no_ti, f"dag run {dag_id!r}/{run_id!r} has no task instance 'nope'"),
        (no_index, f"dag run {dag_id!r}/{run_id!r} has no task instance 'mapped' with map_index=7"),
        (["--asset-name", f"nope_{unique}"], f"no asset with name='nope_{unique}'"),
        (["--asset-uri", "s3://nope"], "no asset with uri='s3://nope'"),
        (["--asset-id", "999999999"], "no asset with id=999999999"),
    ]
    for options, message in expected:
        for command in (["get", "k"], ["set", "k", "1"], ["delete", "k", "-y"], ["list"], ["clear", "-y"]):
            assert refused(*command, *options) == message


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--map-index", "-2"], "--map-index must be from -1 to 2147483647, not -2"),
        # Airflow's columns are 32-bit: SQLite could not even compare a larger number.
        (["--map-index", "2147483648"], "--map-index must be from -1 to 2147483647, not 2147483648"),
        (["--asset-id", "0"], "--asset-id must be from 1 to 2147483647, not 0"),
        (["--asset-id", "9" * 20], "--asset-id must be from 1 to 2147483647, not 99999999999999999999"),
        (["--map-index", "one"], "--map-index must be an integer, not 'one'"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(airflow_parser, capsys, option, message):
    with pytest.raises(SystemExit) as exited:
        airflow_parser.parse_args(["state", "get", "k", *option])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# --- list ---------------------------------------------------------------------------------------


def test_list_filters_by_prefix_and_pages_in_key_order(cli, ti, capsys, airflow_parser):
    for key in ("job/b", "job/a", "job/c", "other", "jobless"):
        cli("set", key, json.dumps(key), *ti)
    assert list(state_of(ti, cli)) == ["job/a", "job/b", "job/c", "jobless", "other"]
    assert list(state_of([*ti, "--key-prefix", "job/"], cli)) == ["job/a", "job/b", "job/c"]

    args = airflow_parser.parse_args(
        ["state", "list", *ti, "--key-prefix", "job", "--limit", "2", "--offset", "1"]
    )
    capsys.readouterr()
    args.func(args)
    shown = capsys.readouterr()
    assert [line.split()[0] for line in shown.out.splitlines()[2:] if line.strip()] == ["job/b", "job/c"]
    assert shown.err.strip() == "keys 2-3 of 4"

    assert state_of([*ti, "--key-prefix", "nothing"], cli) == {}
    assert cli("list", *ti, "--key-prefix", "nothing").strip() == "No data found"


@pytest.mark.parametrize(
    "option", [["--limit", "0"], ["--offset", "-1"], ["--limit", "x"], ["--offset", "2147483648"]]
)
def test_list_paging_options_are_checked(airflow_parser, ti, option, capsys):
    with pytest.raises(SystemExit) as exited:
        airflow_parser.parse_args(["state", "list", *ti, *option])
    assert exited.value.code == 2


def test_list_in_every_format(cli, asset):
    cli("set", "n", "3", "--asset-id", asset["id"])
    cli("set", "s", '"3"', "--asset-id", asset["id"])
    scope = ["--asset-id", asset["id"]]
    as_json = json.loads(cli("list", *scope, "-o", "json"))
    as_yaml = yaml.safe_load(cli("list", *scope, "-o", "yaml"))
    for rows in (as_json, as_yaml):
        assert [(row["key"], row["value"]) for row in rows] == [("n", 3), ("s", "3")]
    table = cli("list", *scope, "-o", "table").splitlines()
    plain = cli("list", *scope, "-o", "plain").splitlines()
    for lines in (table, plain):
        cells = [[cell for cell in line.split() if cell != "|"] for line in lines]
        rows = [row for row in cells if row and row[0] in ("n", "s")]
        assert [row[:2] for row in rows] == [["n", "3"], ["s", '"3"']]


# --- delete and clear ask first -------------------------------------------------------------------


def test_delete_asks_and_no_changes_nothing(cli, refused, ti, answer):
    cli("set", "k", "1", *ti)
    answer("n\n")
    cancelled = refused("delete", "k", *ti)  # exit 1: a script sees that nothing was done
    assert cancelled == "Cancelled, nothing was deleted."
    assert "Delete key 'k' of task instance (" in cancelled.stdout
    answer("")  # stdin closed: a script that forgot -y
    assert refused("delete", "k", *ti) == "Cancelled, nothing was deleted."
    assert state_of(ti, cli) == {"k": 1}
    answer("maybe\ny\n")
    out = cli("delete", "k", *ti)
    assert "Please respond with y/yes or n/no." in out and "Deleted key 'k'" in out
    assert state_of(ti, cli) == {}


def test_delete_with_yes_does_not_ask(cli, ti, monkeypatch):
    cli("set", "k", "1", *ti)
    cli("set", "kept", "2", *ti)
    monkeypatch.setattr("builtins.input", lambda *_: pytest.fail("asked despite -y"))
    assert cli("delete", "k", *ti, "--yes").startswith("Deleted key 'k' of task instance")
    assert state_of(ti, cli) == {"kept": 2}


def test_delete_of_a_missing_key_exits_1_without_asking(refused, ti, monkeypatch):
    monkeypatch.setattr("builtins.input", lambda *_: pytest.fail("asked about a key that is not there"))
    assert refused("delete", "nope", *ti) == "no state stored under key 'nope'"


def test_clear_asks_and_no_changes_nothing(cli, refused, ti, asset, answer):
    for scope in (ti, ["--asset-uri", asset["uri"]]):
        cli("set", "a", "1", *scope)
        cli("set", "b", "2", *scope)
        answer("n\n")
        cancelled = refused("clear", *scope)
        assert cancelled == "Cancelled, nothing was cleared." and "Delete all 2 keys of " in cancelled.stdout
        assert state_of(scope, cli) == {"a": 1, "b": 2}
        answer("yes\n")
        assert "Cleared 2 keys of " in cli("clear", *scope)
        assert state_of(scope, cli) == {}
        assert "Nothing to clear: no state stored for " in cli("clear", *scope)


def test_clear_one_map_index_or_all_of_them(cli, ti):
    cli("set", "unmapped", "1", *ti)
    for index in (0, 1, 2):
        cli("set", "k", str(index), *mapped(ti, index))
    assert "Cleared 1 key of " in cli("clear", *mapped(ti, 1), "-y")
    assert [state_of(mapped(ti, index), cli) for index in (0, 1, 2)] == [{"k": 0}, {}, {"k": 2}]
    every_index = [*ti[:-1], "mapped"]
    out = cli("clear", *every_index, "--all-map-indices", "-y")
    assert out.startswith("Cleared 2 keys of every map index of task instance (")
    assert [state_of(mapped(ti, index), cli) for index in (0, 1, 2)] == [{}, {}, {}]
    assert state_of(ti, cli) == {"unmapped": 1}  # another task of the run


def test_clear_all_map_indices_is_for_one_task_of_a_run(refused, ti, asset):
    every_index = [*ti[:-1], "mapped"]
    assert refused("clear", *every_index, "--map-index", "0", "--all-map-indices", "-y") == (
        "--all-map-indices clears every map index of the task; leave out --map-index"
    )
    assert refused("clear", "--asset-id", asset["id"], "--all-map-indices", "-y") == (
        "--all-map-indices is for task state; an asset has no map indices"
    )
    assert refused("clear", *ti[:-1], "nope", "--all-map-indices", "-y") == (
        f"dag run {ti[1]!r}/{ti[3]!r} has no task instance 'nope'"
    )


# --- help, and the real `airflow` command --------------------------------------------------------


def test_help_describes_every_command_and_option(airflow_parser, capsys):
    with pytest.raises(SystemExit):
        airflow_parser.parse_args(["state", "--help"])
    shown = capsys.readouterr().out
    for command in ("get", "set", "increment", "delete", "list", "clear", "clean", "export", "import"):
        assert f"\n    {command} " in shown or f"\n    {command}\n" in shown  # long names wrap
    assert "[state] backend" in shown  # not eaten as rich markup

    for command in STATE_COMMANDS:
        assert command.help and command.description
        for arg in command.args:
            assert arg.kwargs.get("help"), f"{command.name}: {arg.flags} has no help"


@pytest.mark.any_database
def test_the_provider_hook_registers_the_group_in_the_real_airflow_command(ti):
    # Each `airflow` process takes seconds to start: four of them, for what only they can show.
    shown = run_airflow("state", "--help").stdout
    for command in ("get", "set", "delete", "list", "clear", "export", "import"):
        assert command in shown

    run_airflow("state", "set", "job", '{"id": "app_001", "n": 3}', *ti)
    shown = run_airflow("state", "get", "job", *ti, "-o", "json").stdout
    assert json.loads(shown)[0]["value"] == {"id": "app_001", "n": 3}

    missing = run_airflow("state", "get", "nope", *ti, check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == "no state stored under key 'nope'"
    assert "Traceback" not in missing.stderr


@pytest.mark.any_database
def test_what_commands_print_for_scripts_is_alone_on_stdout_at_airflows_log_level(ti, monkeypatch):
    """
    Airflow logs INFO to stdout, at its default level (the tests run at WARNING), and importing its
    models logged alembic 1.20's set-up there: seven lines before the document of `-o json`, in every
    process. The provider info, read before Airflow configures logging, sets that logger to WARNING;
    and our commands load quietly, so they print their output alone even with it at INFO.
    """
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")

    def run(python: str, *args: str) -> str:
        command = [sys.executable, "-c", python, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=True).stdout

    assert run("from airflow.models import TaskInstance") == ""
    # The `airflow` command, with alembic's logger put back to INFO after the provider info set it.
    airflow_as_before = (
        "import logging, sys\n"
        "from airflow.__main__ import main\n"
        "logging.getLogger('alembic.runtime.plugins').setLevel(logging.INFO)\n"
        "sys.argv[0] = 'airflow'\n"
        "main()\n"
    )
    assert run(airflow_as_before, "state", "increment", "n", *ti) == "1\n"  # n=$(airflow state increment ...)
    [row] = json.loads(run(airflow_as_before, "state", "get", "n", *ti, "-o", "json"))
    assert row["value"] == 1


# --- versions, expiry, increment ----------------------------------------------------------


def as_json(cli, *argv: str) -> dict:
    [row] = json.loads(cli(*argv, "-o", "json"))
    return row


def moment(text: str | None):
    return None if text is None else datetime.fromisoformat(text)


def test_set_prints_the_new_version_and_if_version_refuses_a_stale_one(cli, refused, ti):
    assert cli("set", "k", "1", *ti).strip().endswith(", now at version 1")
    assert cli("set", "k", "2", *ti, "--if-version", "1").strip().endswith(", now at version 2")
    message = refused("set", "k", "3", *ti, "--if-version", "1")
    assert message == (
        "state key 'k' is at version 2, not at version 1: it was written in between; read it again and retry"
    )
    assert refused("set", "k", "3", *ti, "--if-version", "0").startswith(
        "state key 'k' is at version 2, not absent (if_version=0)"
    )
    row = as_json(cli, "get", "k", *ti)
    assert (row["value"], row["version"]) == (2, 2)  # the refused writes changed nothing
    assert cli("set", "new", '"x"', *ti, "--if-version", "0").strip().endswith(", now at version 1")
    assert refused("set", "absent", "1", *ti, "--if-version", "4").startswith(
        "state key 'absent' is absent, not at version 4"
    )
    assert set(state_of(ti, cli)) == {"k", "new"}


def test_set_ttl_sets_when_the_key_expires_and_never_clears_it(cli, refused, ti, asset):
    before = utcnow()
    cli("set", "k", "1", *ti, "--ttl", "2h")
    expires_at = moment(as_json(cli, "get", "k", *ti)["expires_at"])
    assert timedelta_between(before, expires_at) == pytest.approx(7200, abs=60)
    cli("set", "k", "1", *ti, "--ttl", "never")
    assert as_json(cli, "get", "k", *ti)["expires_at"] is None
    # Without --ttl: task state gets [state] default_task_retention (30 days), asset state never.
    cli("set", "k", "1", *ti)
    default = moment(as_json(cli, "get", "k", *ti)["expires_at"])
    assert timedelta_between(before, default) == pytest.approx(30 * 86400, abs=60)
    cli("set", "w", "1", "--asset-id", asset["id"])
    assert as_json(cli, "get", "w", "--asset-id", asset["id"])["expires_at"] is None

    assert refused("set", "k", "1", *ti, "--ttl", "soon").startswith(
        "invalid --ttl: 'soon' is not a duration"
    )
    assert refused("set", "k", "1", *ti, "--ttl", "0").startswith(
        "invalid --ttl: a ttl must be longer than 0"
    )
    assert refused("set", "k", "1", *ti, "--ttl", "99999w").startswith(
        "invalid --ttl: a ttl must be at most 36500 days"
    )


def timedelta_between(start, end) -> float:
    return (end - start).total_seconds()


def test_an_expired_key_is_not_shown_or_counted(cli, refused, ti):
    scope = task_scope(ti[1], ti[3], ti[5])
    get_state_backend().write(scope, "gone", "1", expires_at=utcnow() - timedelta(seconds=1))
    cli("set", "live", "1", *ti)
    assert refused("get", "gone", *ti) == "no state stored under key 'gone'"
    assert state_of(ti, cli) == {"live": 1}
    assert "Cleared 1 key of " in cli("clear", *ti, "-y")


def test_increment_prints_the_new_value_and_refuses_what_is_not_an_integer(cli, refused, ti):
    assert cli("increment", "n", *ti).strip() == "1"  # absent counts as 0
    assert cli("increment", "n", *ti, "--by", "41").strip() == "42"
    assert cli("increment", "n", *ti, "--by", "-50").strip() == "-8"
    row = as_json(cli, "get", "n", *ti)
    assert (row["value"], row["version"]) == (-8, 3)
    cli("increment", "short_lived", *ti, "--ttl", "90s")
    assert as_json(cli, "get", "short_lived", *ti)["expires_at"] is not None

    cli("set", "text", '"3"', *ti)
    message = refused("increment", "text", *ti)
    assert message.startswith("state key 'text' holds '\"3\"', not an integer")
    cli("set", "big", str(2**63 - 1), *ti)
    assert "would leave the 64-bit range" in refused("increment", "big", *ti)
    assert state_of(ti, cli) == {"n": -8, "short_lived": 1, "text": "3", "big": 2**63 - 1}


def test_increment_options_are_checked(airflow_parser, capsys, ti):
    for option in (["--by", "x"], ["--by", str(2**63)]):
        with pytest.raises(SystemExit) as exited:
            airflow_parser.parse_args(["state", "increment", "n", *ti, *option])
        assert exited.value.code == 2
    assert "--by must be a 64-bit integer" in capsys.readouterr().err


def test_asset_state_shows_its_last_writer(cli, asset):
    scope = ["--asset-id", asset["id"]]
    cli("set", "by_cli", "1", *scope)
    row = as_json(cli, "get", "by_cli", *scope)
    assert row["updated_by"] == {"kind": "cli"} and row["version"] == 1
    assert "updated_by_try" not in row
    writer = StateWriter.task_try("etl", "manual__1", "load", 3, 2)
    get_state_backend().write(AssetScope(int(asset["id"])), "by_task", "2", writer=writer)
    row = as_json(cli, "get", "by_task", *scope)
    assert row["updated_by"] == {
        "kind": "task",
        "dag_id": "etl",
        "run_id": "manual__1",
        "task_id": "load",
        "map_index": 3,
        "try_number": 2,
    }
    table = cli("list", *scope, "-o", "plain")
    assert "etl/manual__1/load[3] try 2" in table and " cli" in table
    for header in ("version", "expires_at", "updated_by"):
        assert header in cli("list", *scope).splitlines()[0]


# --- clean ----------------------------------------------------------------------------------------


@pytest.fixture
def expired_keys(ti, asset) -> Callable[[int], list[tuple]]:
    """
    ``expired_keys(n)``: *n* keys that expired a minute ago (task and asset state), with nothing
    else expired in the database; returns their (scope, key).
    """

    backend = get_state_backend()
    # What earlier tests left expired, or left behind a clear (test_clears), would blur the counts.
    backend.cleanup(now=utcnow())
    with create_session() as session:
        manage.discard_what_clears_left(session, dry_run=False)
    scopes = [task_scope(ti[1], ti[3], ti[5]), AssetScope(int(asset["id"]))]

    def make(count: int) -> list[tuple]:
        made = []
        for number in range(count):
            scope = scopes[number % 2]
            backend.write(scope, f"expired_{number}", "1", expires_at=utcnow() - timedelta(minutes=1))
            made.append((scope, f"expired_{number}"))
        return made

    return make


def removable(**options) -> int:
    """What the backend would remove now: the test's view of what is physically still there."""

    return get_state_backend().cleanup(now=utcnow(), dry_run=True, **options)


def test_clean_removes_expired_keys_only_and_dry_run_removes_nothing(cli, ti, asset, expired_keys):
    expired_keys(3)
    cli("set", "live", "1", *ti, "--ttl", "1h")
    cli("set", "forever", "1", "--asset-id", asset["id"])
    assert (
        cli("clean", "--dry-run").strip()
        == "Dry run: would remove 3 keys (expired keys); nothing was removed"
    )
    assert removable() == 3
    assert cli("clean", "-y").strip() == "Removed 3 keys (expired keys)"
    assert removable() == 0
    assert state_of(ti, cli) == {"live": 1}
    assert state_of(["--asset-id", asset["id"]], cli) == {"forever": 1}
    assert cli("clean", "-y").strip() == "Removed 0 keys (expired keys)"


def test_clean_in_batches_smaller_than_the_count(cli, expired_keys):
    expired_keys(7)
    assert cli("clean", "--batch-size", "2", "-y").strip() == "Removed 7 keys (expired keys)"
    assert removable() == 0


def test_clean_asks_first_unless_yes(cli, refused, expired_keys, answer, monkeypatch):
    expired_keys(2)
    answer("n\n")
    cancelled = refused("clean")
    assert cancelled == "Cancelled, nothing was removed." and "Remove expired keys from " in cancelled.stdout
    answer("")  # stdin closed: a script that forgot -y
    assert refused("clean") == "Cancelled, nothing was removed."
    assert removable() == 2
    answer("y\n")
    assert "Removed 2 keys (expired keys)" in cli("clean")
    monkeypatch.setattr("builtins.input", lambda *_: pytest.fail("asked despite -y or --dry-run"))
    cli("clean", "--dry-run")
    cli("clean", "--yes")


def test_clean_older_than_also_removes_keys_not_written_since(cli, ti, asset, expired_keys):
    expired_keys(1)
    cli("set", "old", "1", *ti, "--ttl", "never")
    cli("set", "old", "1", "--asset-id", asset["id"])
    time.sleep(0.05)
    cutoff = utcnow()
    time.sleep(0.05)
    cli("set", "new", "1", *ti, "--ttl", "never")
    # A duration: nothing here is a day old, so only the expired key goes.
    assert removable(updated_before=utcnow()) >= 3
    out = cli("clean", "--older-than", "1d", "--dry-run")
    assert out.startswith("Dry run: would remove ") and "and keys last written before " in out
    out = cli("clean", "--older-than", cutoff.isoformat(), "-y")
    assert out.startswith("Removed ") and f"keys last written before {cutoff.isoformat()}" in out
    assert int(out.split()[1]) >= 3
    assert state_of(ti, cli) == {"new": 1}
    assert state_of(["--asset-id", asset["id"]], cli) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("30", "--older-than 30: say the unit, e.g. 30d for 30 days"),
        ("soon", "--older-than 'soon' is neither a duration"),
        ("0d", "--older-than '0d' is no time at all"),
        ("2999-01-01", "--older-than '2999-01-01' is in the future"),
    ],
)
def test_clean_older_than_refuses_what_would_remove_everything_or_means_nothing(refused, value, message):
    assert refused("clean", "--older-than", value, "-y").startswith(message)


class WithoutExpiry(MemoryStateBackend):
    """A backend that keeps no expiry, and so cleans up with the contract's default."""

    supports_expiry = False

    def cleanup(self, **options):
        return BaseStateBackend.cleanup(self, **options)


def test_clean_on_a_backend_without_expiry_says_so(cli, refused, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATE__BACKEND", f"{__name__}.WithoutExpiry")
    reset_state_backend()
    try:
        out = cli("clean", "-y")
        assert "Removed 0 keys" in out and "WithoutExpiry does not support expiry" in out
        assert refused("clean", "--older-than", "30d", "-y").startswith(
            "WithoutExpiry does not support removing keys by age"
        )
    finally:
        reset_state_backend()
