"""Helpers the conformance kit's test classes share."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .backend import BaseStateBackend
from .validation import MAX_KEY_LENGTH

#: Keys and values no backend may store, with the error each must raise before any I/O.
BAD_KEYS = {
    "empty": ("", ValueError),
    "too-long": ("k" * (MAX_KEY_LENGTH + 1), ValueError),
    "nul": ("nul\x00byte", ValueError),
    "surrogate": ("lone-\ud800-surrogate", ValueError),
    "none": (None, TypeError),
    "int": (42, TypeError),
}
BAD_VALUES = {
    "none": (None, TypeError),
    "int": (42, TypeError),
    "bytes": (b"bytes", TypeError),
    "dict": ({"a": 1}, TypeError),
    "nul": ("nul\x00byte", ValueError),
    "surrogate": ("lone-\udfff-surrogate", ValueError),
}


def now() -> datetime:
    return datetime.now(UTC)


def past() -> datetime:
    return now() - timedelta(hours=1)


def future() -> datetime:
    return now() + timedelta(hours=1)


def require(condition: bool, backend: BaseStateBackend, what: str) -> None:
    if not condition:
        pytest.skip(f"{type(backend).__name__} does not support {what}")


def require_listing(backend: BaseStateBackend, scope: Any) -> None:
    """Skip the test when the backend does not list keys (that is optional)."""
    if listed(backend.keys, scope) is None:
        pytest.skip(f"{type(backend).__name__} does not list keys")


def listed(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` of a listing method, or ``None`` when the backend does not list keys (optional)."""
    try:
        return call(*args)
    except NotImplementedError:
        return None


def refused(
    backend: BaseStateBackend,
    method: str,
    *args: Any,
    error: type[Exception],
    match: str | None = None,
    **kwargs: Any,
) -> None:
    """Check that *method* and its async twin both raise *error* for these arguments."""
    with pytest.raises(error, match=match):
        getattr(backend, method)(*args, **kwargs)
    with pytest.raises(error, match=match):
        asyncio.run(getattr(backend, f"a{method}")(*args, **kwargs))


def in_threads(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(n)`` in *count* threads started together; re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(n: int) -> None:
        try:
            barrier.wait()
            work(n)
        except BaseException as error:  # re-raised in the test thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def race_reader(what: str, write: Callable[[], None], read: Callable[[], str | None]) -> None:
    """
    Run *write* in one thread while another calls *read* until it is done (at least once); fail if
    *read* ever describes what it saw as half applied (a string; ``None``: seen whole).
    """
    done = threading.Event()
    torn: list[str] = []
    reads = 0

    def race(n: int) -> None:  # thread 0 writes, thread 1 reads meanwhile
        nonlocal reads
        if n == 0:
            try:
                write()
            finally:
                done.set()
            return
        while not done.is_set() or reads == 0:
            reads += 1
            if (seen := read()) is not None:
                torn.append(seen)

    in_threads(2, race)
    assert not torn, f"{len(torn)} of {reads} reads saw {what} half applied, e.g. {torn[0]}"
