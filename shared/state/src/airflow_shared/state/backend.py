"""The abstract class every state backend implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from .entries import StateEntry, StateEntryPage, page_of_keys, validate_listing
from .scopes import StateScope


class BaseStateBackend(ABC):
    """
    Storage for task and asset state.

    A backend routes on the scope's type (:class:`TaskScope` or :class:`AssetScope`) inside each
    method. Implement the four sync methods; the async ``a*`` variants run them in a worker
    thread (with the caller's context variables) so a sync-only backend never blocks an event
    loop. Backends with a native async client override the ``a*`` methods.

    Which try of a task instance wrote a value is part of the contract: the state API stores task
    state through :meth:`set_by_try` (and :meth:`aset_by_try`), which default to :meth:`set` (and
    :meth:`aset`). Backends that can store the writer override them.

    Every method takes a keyword-only ``session``: backends built on SQLAlchemy join the caller's
    session (and leave committing to it); others ignore it.

    Implementations validate their input before any I/O with the helpers in
    :mod:`airflow_shared.state.validation`, and :mod:`airflow_shared.state.testing` is a pytest
    suite that checks a backend against this contract.
    """

    @abstractmethod
    def get(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        """Return the value stored under *key* in *scope*, or ``None`` when there is none."""

    @abstractmethod
    def set(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        """Store *value* under *key* in *scope*, replacing any earlier value atomically."""

    @abstractmethod
    def delete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        """Remove *key* from *scope*; removing a key that does not exist is not an error."""

    @abstractmethod
    def clear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        """
        Remove every key of *scope*.

        For a task scope only its own map index is cleared unless *all_map_indices* is true, in
        which case every map index of that task in that run is cleared. Asset scopes ignore it.
        """

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        """
        :meth:`set`, telling the backend which try of the task instance writes the value.

        *try_number* is ``None`` for asset state and for writes not made by a task try (the CLI,
        server code, tests). The default ignores it and calls :meth:`set`; backends that can store
        the writer override this method (and :meth:`aset_by_try`), and validate like :meth:`set`.
        """
        self.set(scope, key, value, session=session)

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        """
        Return the keys stored in *scope*, sorted.

        Optional: backends that cannot list keys leave this default, which raises
        ``NotImplementedError``; the conformance kit then skips its listing tests.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support listing state keys")

    def entries(
        self,
        scope: StateScope,
        *,
        key_prefix: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        session: Any = None,
    ) -> StateEntryPage:
        """
        Return a page of the entries of *scope*: sorted by key (by code point), only keys starting
        with *key_prefix* when given, skipping *offset* of them and at most *limit* (all when
        ``None``), with the total that matched.

        This is what operators see (the REST API, ``airflow state list`` and ``export``, the UI).
        The default is built on :meth:`keys` and :meth:`get` and knows nothing of when or by which
        try a key was written; backends that record it override this method. Validate the scope
        and :func:`~airflow_shared.state.entries.validate_listing` first.
        """
        validate_listing(key_prefix, offset, limit)
        keys, total = page_of_keys(self.keys(scope, session=session), key_prefix, offset, limit)
        found = []
        for key in keys:
            value = self.get(scope, key, session=session)
            if value is not None:  # deleted between listing and reading
                found.append(StateEntry(key, value))
        return StateEntryPage(found, total)

    def key_counts(self, scopes: Sequence[StateScope], *, session: Any = None) -> list[int]:
        """
        Return how many keys each of *scopes* holds, in the same order.

        Operators use it to find which task instances of a run (and which assets) hold state.
        The default calls :meth:`keys` once per scope; backends that can count many scopes in one
        round trip override it.
        """
        return [len(self.keys(scope, session=session)) for scope in scopes]

    async def aget(self, scope: StateScope, key: str, *, session: Any = None) -> str | None:
        """Async :meth:`get`."""
        return await asyncio.to_thread(self.get, scope, key, session=session)

    async def aset(self, scope: StateScope, key: str, value: str, *, session: Any = None) -> None:
        """Async :meth:`set`."""
        await asyncio.to_thread(self.set, scope, key, value, session=session)

    async def aset_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        """
        Async :meth:`set_by_try`. The default runs an overridden :meth:`set_by_try` in a worker
        thread, so the try is not lost; for a backend that does not record it, it calls :meth:`aset`.
        """
        if type(self).set_by_try is BaseStateBackend.set_by_try:
            await self.aset(scope, key, value, session=session)
        else:
            await asyncio.to_thread(
                self.set_by_try, scope, key, value, try_number=try_number, session=session
            )

    async def adelete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        """Async :meth:`delete`."""
        await asyncio.to_thread(self.delete, scope, key, session=session)

    async def aclear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        """Async :meth:`clear`."""
        await asyncio.to_thread(self.clear, scope, all_map_indices=all_map_indices, session=session)

    async def akeys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        """Async :meth:`keys`."""
        return await asyncio.to_thread(self.keys, scope, session=session)
