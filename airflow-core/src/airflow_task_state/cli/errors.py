"""
How `airflow state` commands run, fail and ask: what the operator got wrong, and a database or
backend server that cannot be reached, is one line on stderr and exit status 1
(``SystemExit(message)``, as Airflow's own commands fail), never a traceback.
"""

from __future__ import annotations

import functools
from argparse import Namespace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from airflow.utils.cli import action_cli, suppress_logs_and_warning
from airflow.utils.helpers import ask_yesno
from airflow.utils.providers_configuration_loader import providers_configuration_loaded
from airflow_shared.state import BaseStateBackend, StateCapabilityError, StateConflictError

from airflow_task_state.cli.unreachable import check_database, one_line_when_unreachable
from airflow_task_state.configured_backend import get_state_backend
from airflow_task_state.exceptions import StateError
from airflow_task_state.manage import NotFound

F = TypeVar("F", bound=Callable[..., Any])

#: Errors every command turns into a one-line exit: their messages say what the operator needs (a
#: missing dag run or key, an unusable backend, the stored version, what the backend cannot do).
OPERATOR_ERRORS = (NotFound, StateError, StateConflictError, StateCapabilityError)


@contextmanager
def refusing(
    what: str | None = None, errors: tuple[type[Exception], ...] = (ValueError, TypeError)
) -> Iterator[None]:
    """
    Turn *errors* into a one-line exit, prefixed by *what*. Only around checks of the operator's
    input: elsewhere ValueError and TypeError are bugs and keep their traceback.
    """
    try:
        yield
    except errors as error:
        raise SystemExit(f"{what}: {error}" if what else str(error)) from None


def command(*, writes: bool) -> Callable[[F], F]:
    """Wrap a command as Airflow wraps its own: writes are action-logged, reads print no log lines."""

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def run(args: Namespace) -> None:
            with one_line_when_unreachable(), refusing(errors=OPERATOR_ERRORS):
                function(args)

        loaded = providers_configuration_loaded(run)
        if not writes:
            return cast("F", suppress_logs_and_warning(loaded))
        logged = action_cli(loaded)

        @functools.wraps(function)
        def run_logged(args: Namespace) -> None:
            # Airflow's action logging and migration check use the database before the command
            # does, with a warning and a traceback of their own when it is down: look first.
            with one_line_when_unreachable():
                check_database()
            logged(args)

        return cast("F", run_logged)

    return wrap


def configured_backend() -> BaseStateBackend:
    """The configured backend, or a one-line exit saying what is wrong with ``[state] backend``."""
    with refusing("cannot use the configured state backend", (ValueError, TypeError, ImportError)):
        return get_state_backend()


def confirm(question: str, *, yes: bool, cancelled: str) -> None:
    """
    Go on with ``-y`` or a yes; otherwise exit 1 with "Cancelled, *cancelled*." (a script sees that
    nothing was done). No answer at all (stdin closed, as in a script that forgot ``-y``) is a no,
    not an endless prompt or a traceback.
    """
    if yes:
        return
    try:
        answer = ask_yesno(f"{question} [y/n]")
    except EOFError:
        print()
        answer = False
    if not answer:
        raise SystemExit(f"Cancelled, {cancelled}.")
