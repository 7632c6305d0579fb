"""
The conformance kit for wrappers (that measure, log, trace or guard a backend's calls). A wrapper
that forgets a method falls back to the base class's default (a batch becomes one call per key, a
flag reads ``False``), which ``StateBackendConformance`` run through it would not notice.
Subclass :class:`StateBackendWrapperConformance` and provide a fixture ``wrap(backend) -> wrapper``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ._memory import MemoryStateBackend
from .backend import BaseStateBackend, capability_names, contract_methods
from .scopes import AssetScope, TaskScope
from .staged import StagedCommit, StagedOp, StagedWrite
from .writes import StateWriter

_TASK = TaskScope("kit_dag", "kit_run", "kit_task", -1, dag_run_uid="kit-uid")
_ASSET = AssetScope(1)
_WRITER = StateWriter.task_try("kit_dag", "kit_run", "kit_task", -1, 1)

#: A valid call of every contract method (the async twins take the same arguments).
SAMPLE_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "get": ((_TASK, "k"), {}),
    "get_versioned": ((_TASK, "k"), {}),
    "set": ((_TASK, "k", "v"), {}),
    "set_by_try": ((_TASK, "k", "v"), {"try_number": 2}),
    "write": ((_ASSET, "k", "v"), {"writer": _WRITER, "if_version": None}),
    "increment": ((_TASK, "n", 2), {"writer": _WRITER}),
    "delete": ((_TASK, "k"), {}),
    "clear": ((_TASK,), {"all_map_indices": True}),
    "get_many": ((_TASK, ["a", "b"]), {}),
    "set_many": ((_TASK, {"a": "1", "b": "2"}), {"writer": _WRITER}),
    "delete_many": ((_TASK, ["a", "b"]), {}),
    "keys": ((_TASK,), {}),
    "entries": ((_TASK,), {"key_prefix": "k", "limit": 1}),
    "get_entry": ((_ASSET, "k"), {}),
    "key_counts": (([_TASK, _ASSET],), {}),
    "discard_written_through_try": ((_TASK, 1), {}),
    "cleanup": ((), {"now": datetime(2000, 1, 1, tzinfo=UTC), "dry_run": True}),
    "apply_commit": (
        (StagedCommit("kit-commit", _TASK, (StagedWrite(_ASSET, "n", StagedOp.INCREMENT),), _WRITER),),
        {},
    ),
}


# How deep in spied calls the current call is: only calls the wrapper makes itself (depth 0) are
# recorded, not those the wrapped backend makes to its own methods.
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("depth", default=0)


def _spy_on(backend: BaseStateBackend) -> list[str]:
    """Record every contract method called on *backend* from outside it, by name, in order."""
    calls: list[str] = []

    @contextlib.contextmanager
    def recording(name: str) -> Iterator[None]:
        if _depth.get() == 0:
            calls.append(name)
        token = _depth.set(_depth.get() + 1)
        try:
            yield
        finally:
            _depth.reset(token)

    def spy(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                with recording(name):
                    return await method(*args, **kwargs)

            return call_async

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with recording(name):
                return method(*args, **kwargs)

        return call

    for name in contract_methods():
        setattr(backend, name, spy(name, getattr(backend, name)))  # shadows the class's method
    return calls


class StateBackendWrapperConformance:
    """What every wrapper of a backend must pass: it adds behaviour, never removes any."""

    @pytest.fixture
    def wrap(self) -> Callable[[BaseStateBackend], BaseStateBackend]:
        raise NotImplementedError("provide a `wrap` fixture: wrap(backend) -> the wrapper of backend")

    @pytest.fixture
    def wrapped(self) -> BaseStateBackend:
        """The backend the kit wraps; the in-memory reference backend unless overridden."""
        return MemoryStateBackend()

    def test_the_wrapper_is_a_backend(self, wrap, wrapped):
        assert isinstance(wrap(wrapped), BaseStateBackend)

    def test_every_contract_method_is_passed_on_by_the_wrapper_class(self, wrap, wrapped):
        wrapper_class = type(wrap(wrapped))
        inherited = [
            name
            for name in contract_methods()
            if getattr(wrapper_class, name) is getattr(BaseStateBackend, name)
        ]
        assert not inherited, (
            f"{wrapper_class.__name__} inherits BaseStateBackend's default of {', '.join(inherited)}: "
            "calls fall back to the per-key loop or the refusal of the base class instead of reaching "
            "the wrapped backend"
        )

    @pytest.mark.parametrize("declared", [True, False], ids=["all", "none"])
    def test_every_capability_reads_as_the_wrapped_backends(self, wrap, declared):
        # Every capability declared, then none: each must read as declared through the wrapper.
        backend = type("Declares", (MemoryStateBackend,), dict.fromkeys(capability_names(), declared))()
        wrapper = wrap(backend)
        for name in capability_names():
            assert getattr(wrapper, name) == getattr(backend, name), name

    def test_every_call_is_one_call_of_the_same_method_of_the_wrapped_backend(self, wrap, wrapped):
        calls = _spy_on(wrapped)  # before wrapping: a wrapper may keep bound methods
        wrapper = wrap(wrapped)
        wrong = {}
        for name in contract_methods():
            sync = name[1:] if inspect.iscoroutinefunction(getattr(BaseStateBackend, name)) else name
            assert sync in SAMPLE_CALLS, f"the kit has no sample call of BaseStateBackend.{sync}: add one"
            args, kwargs = SAMPLE_CALLS[sync]
            calls.clear()
            result = getattr(wrapper, name)(*args, **kwargs)
            if inspect.iscoroutine(result):
                asyncio.run(result)
            if calls != [name]:
                wrong[name] = list(calls)
        assert not wrong, (
            f"calls on the wrapper that did not reach the same method once (called instead): {wrong}"
        )
