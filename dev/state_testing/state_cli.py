"""
Fixtures that run `airflow state ...` in-process through Airflow's real CLI parser (the provider's
CLI hook included), for the tests of the commands and of export/import.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest


class Refusal(str):
    """The one-line message a refused command exited with; ``stdout``/``stderr``: what it wrote first."""

    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def airflow_parser() -> Any:
    from airflow.cli import cli_parser

    return cli_parser.get_parser()


@pytest.fixture
def cli(airflow_parser, capsys) -> Callable[..., str]:
    """``cli("get", "k", ...)`` runs `airflow state get k ...` in-process and returns its stdout."""

    def run(*argv: str) -> str:
        capsys.readouterr()
        args = airflow_parser.parse_args(["state", *argv])
        args.func(args)
        return capsys.readouterr().out

    return run


@pytest.fixture
def refused(airflow_parser, capsys) -> Callable[..., Refusal]:
    """``refused(...)``: the command must exit 1 with a one-line message, which is returned."""

    def run(*argv: str) -> Refusal:
        capsys.readouterr()
        args = airflow_parser.parse_args(["state", *argv])
        with pytest.raises(SystemExit) as exited:
            args.func(args)
        message = exited.value.code
        assert isinstance(message, str), f"exit status {message!r}, not a message"
        assert message and "\n" not in message, message
        refusal = Refusal(message)
        refusal.stdout, refusal.stderr = capsys.readouterr()
        return refusal

    return run


@pytest.fixture
def answer(monkeypatch) -> Callable[[str], None]:
    """``answer("n")``: what the operator types at the next confirmation ("" for a closed stdin)."""

    def type_in(text: str) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO(text))

    return type_in
