"""
One async Redis client per event loop: a ``redis.asyncio`` connection fails in any loop but the one
that opened it, and task code may call ``asyncio.run`` several times.

Each client is closed while its loop still runs: a suspended async generator on the loop, which
``loop.shutdown_asyncgens()`` (run by ``asyncio.run``) closes before the loop. Loops closed without
that step are forgotten on the next call, and the garbage collector releases their sockets.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """Create a resource on first use in each event loop, and close it when that loop shuts down."""

    def __init__(self, create: Callable[[], T], close: Callable[[T], Awaitable[object]]) -> None:
        self._create = create
        self._close = close
        # Threads run their own loops, so the map is shared across threads.
        self._lock = threading.Lock()
        self._items: dict[asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None, None]]] = {}

    async def get(self) -> T:
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._items.get(loop)
            if entry is not None:
                return entry[0]
            for stale in [other for other in self._items if other.is_closed()]:
                del self._items[stale]
            item = self._create()
            closer = self._close_at_shutdown(loop, item)
            # The loop holds its async generators weakly: this map keeps the closer alive.
            self._items[loop] = (item, closer)
        # The first step runs to the `yield` without suspending, and registers the generator with
        # the loop's async-generator hooks, which is what makes shutdown_asyncgens() close it.
        await closer.__anext__()
        return item

    async def close_current(self) -> None:
        """Close this loop's resource now, if it has one."""
        with self._lock:
            entry = self._items.get(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()

    def forget_all(self) -> None:
        """Drop every resource without awaiting (for a sync close; their loops may be gone)."""
        with self._lock:
            self._items.clear()

    async def _close_at_shutdown(
        self, loop: asyncio.AbstractEventLoop, item: T
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                entry = self._items.get(loop)
                if entry is not None and entry[0] is item:
                    del self._items[loop]
            await self._close(item)
