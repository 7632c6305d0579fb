"""
Long commands (export, import, clean) show what they are doing on stderr when it is a terminal,
ending in the final count, and write nothing extra when it is not: real `airflow` processes under a
pseudo-terminal, and the commands in this process with stderr captured.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_database


def run_on_a_terminal(*args: str) -> tuple[str, list[str]]:
    """Run `airflow *args* with stderr on a pseudo-terminal: (stdout, the states of stderr's lines)."""
    terminal, stderr = pty.openpty()
    airflow = Path(sys.executable).with_name("airflow")
    process = subprocess.Popen(
        [str(airflow), *args], stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True
    )
    os.close(stderr)
    written = b""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        written += chunk
    os.close(terminal)
    stdout = process.stdout.read() if process.stdout else ""
    assert process.wait(timeout=120) == 0, written.decode()
    # Every state the line went through: "\r" rewrites it in place, "\n" (\r\n on a terminal) ends it.
    states = [state.strip() for state in re.split(r"[\r\n]+", written.decode()) if state.strip()]
    return stdout, states


@pytest.fixture
def asset_with_state(make_asset, cli) -> list[str]:
    asset_id = make_asset(1)
    for key in ("a", "b", "c"):
        cli("set", key, "1", "--asset-id", str(asset_id))
    cli("set", "short_lived", "1", "--asset-id", str(asset_id), "--ttl", "1s")
    return ["--asset-id", str(asset_id)]


def test_export_import_and_clean_show_progress_on_a_terminal_ending_in_the_final_count(
    asset_with_state, tmp_path
):
    exported = tmp_path / "state.jsonl"
    stdout, states = run_on_a_terminal("state", "export", "--file", str(exported))
    summary = re.fullmatch(r"Exported (.*) to .*", stdout.strip())
    assert summary, stdout
    progress = [state for state in states if state.startswith("Exporting: ")]
    assert progress, states
    assert progress[-1].startswith(f"Exporting: {summary.group(1)} (")  # the final count, and runs read

    rows = len(exported.read_text().splitlines())
    stdout, states = run_on_a_terminal("state", "import", str(exported), "-y")
    assert states[-2:] == [f"Checking: line {rows}/{rows}, 0 refusals", f"Writing: {rows}/{rows} keys"]
    assert stdout.startswith(f"Imported {rows} keys")

    time.sleep(1)  # the key set with --ttl 1s expires
    stdout, states = run_on_a_terminal("state", "clean", "--dry-run")
    removed = re.match(r"Dry run: would remove (\d+ keys?) \(expired keys\)", stdout)
    assert removed, stdout
    from airflow_task_state.metastore import MetastoreStateBackend  # this Airflow line's class

    backend = MetastoreStateBackend.__name__
    final = re.fullmatch(rf"Counting expired keys in {backend}: (.*) \(\d+ s\)", states[-1])
    assert final and final.group(1) == removed.group(1), states


def test_nothing_extra_is_written_when_stderr_is_not_a_terminal(
    asset_with_state, airflow_parser, capsys, tmp_path
):
    def run(*argv: str) -> tuple[str, str]:
        args = airflow_parser.parse_args(["state", *argv])
        args.func(args)
        return capsys.readouterr()

    capsys.readouterr()
    out, err = run("export", "--assets-only")
    assert all(json.loads(line) for line in out.splitlines())  # only the rows on stdout
    assert err.count("\n") == 1 and err.startswith("Exported ") and "\r" not in err

    exported = tmp_path / "state.jsonl"
    for argv, said in [
        (("export", "--file", str(exported)), "Exported "),
        (("import", str(exported), "-y"), "Imported "),
        (("clean", "--dry-run"), "Dry run: "),
    ]:
        out, err = run(*argv)
        assert err == "" and out.count("\n") == 1 and out.startswith(said) and "\r" not in out


def test_a_progress_line_wider_than_the_terminal_is_still_rewritten_in_place(monkeypatch):
    """
    An 80-column terminal (the default of most): a progress line longer than the terminal wraps,
    and "\\r" then goes back only to the start of its last row, so every rewrite would leave a row
    behind and the screen would scroll with stale copies. Export's line passes 80 columns with a
    few thousand keys; clean's with --older-than always does.
    """
    import fcntl
    import struct
    import termios

    from airflow_task_state.cli.export_command import _Tally
    from airflow_task_state.cli.progress import Progress

    monkeypatch.setenv("COLUMNS", "80")
    terminal, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    stream = os.fdopen(side, "w")
    tally = _Tally(tasks=[3] * 1200, assets=[2] * 7, runs=9990)
    with Progress(stream) as progress:
        for _ in range(3):
            tally.runs += 1
            progress.show(f"Exporting: {tally}", now=True)
        progress.done(f"Exporting: {tally}")
    stream.close()
    written = b""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:
            break
        if not chunk:
            break
        written += chunk
    os.close(terminal)
    rows = [row for row in re.split(r"[\r\n]+", written.decode()) if row.strip()]
    # Rewritten lines are cut to the width; the final one stays whole, since nothing rewrites it.
    assert len(rows) == 4 and all(len(row) < 80 for row in rows[:-1]), [len(row) for row in rows]
    assert rows[-1] == f"Exporting: {tally}" and len(rows[-1]) > 80
