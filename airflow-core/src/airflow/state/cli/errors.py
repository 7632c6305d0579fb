"""
How `airflow state` commands fail and ask: one line on stderr and exit status 1, never a traceback,
for what the operator got wrong; a y/n question unless ``-y``.

Airflow's own commands fail with ``SystemExit(message)`` (Python prints the message to stderr and
exits 1), so these do too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.state.exceptions import StateError
from airflow.state.manage import NotFound
from airflow_shared.state import StateCapabilityError, StateConflictError

if TYPE_CHECKING:
    from airflow_shared.state import BaseStateBackend

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> SystemExit:
    """The error to raise for a refusal: ``raise fail("...")``."""
    return SystemExit(message)


@contextmanager
def refusing(what: str | None = None) -> Iterator[None]:
    """
    Turn the ``ValueError``/``TypeError`` of the shared validators and the codec (a bad key, a value
    that is not JSON or too large) into a one-line exit, prefixed by *what* when given.

    Only around checks of the operator's input: elsewhere those errors are bugs and keep their
    traceback.
    """
    try:
        yield
    except (ValueError, TypeError) as error:
        raise fail(f"{what}: {error}" if what else str(error)) from None


def one_line_errors(command: F) -> F:
    """
    Exit with the message of a missing dag run, task instance, asset or key (``manage.NotFound``),
    of the errors ``airflow.state`` raises on purpose (``StateError``: an unusable backend), of a
    conditional write that lost (``StateConflictError``: its message names the stored version) and
    of a backend asked for what it cannot do (``StateCapabilityError``: its message says which).
    """

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except NotFound as missing:
            raise fail(missing.message) from None
        except (StateError, StateConflictError, StateCapabilityError) as error:
            raise fail(str(error)) from None

    return run  # type: ignore[return-value]


def configured_backend() -> BaseStateBackend:
    """The configured backend, or a one-line exit saying what is wrong with ``[state] backend``."""
    from airflow.state.configured_backend import get_state_backend

    try:
        return get_state_backend()
    except (ValueError, TypeError, ImportError) as error:
        raise fail(f"cannot use the configured state backend: {error}") from None


def confirmed(question: str, *, yes: bool) -> bool:
    """
    True when ``-y`` was given or the operator answers yes. No answer at all (stdin closed, as in
    a script that forgot ``-y``) is a no, not an endless prompt or a traceback.
    """
    if yes:
        return True
    from airflow.utils.helpers import ask_yesno

    try:
        return ask_yesno(f"{question} [y/n]")
    except EOFError:
        print()
        return False
