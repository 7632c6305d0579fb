"""The abstract class every state backend implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from .entries import StateEntry, StateEntryPage, page_of_keys, validate_listing
from .many import validate_many_keys, validate_many_values
from .scopes import StateScope
from .validation import validate_key, validate_scope
from .writes import (
    StateCapabilityError,
    StateConflictError,
    StateWriter,
    VersionedValue,
    incremented,
    validate_increment,
    validate_write_options,
    validate_writer,
)


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

    **Capabilities.** Beyond the four methods, a backend may support versioned writes
    (:meth:`get_versioned`, :meth:`write` with ``if_version``), per-key expiry (:meth:`write` with
    ``expires_at``, :meth:`cleanup`) and atomic increments (:meth:`increment`). It says which with
    the class attributes below, which callers and the conformance kit read; asking a backend for
    one it lacks raises :class:`StateCapabilityError`, never a silent fallback.

    **Many keys.** :meth:`get_many`, :meth:`set_many` and :meth:`delete_many` take up to
    :data:`~airflow_shared.state.many.MAX_MANY_KEYS` keys. Their defaults call the single-key
    methods once per key; backends that can do a batch in one round trip override them, and say
    with :attr:`supports_atomic_many` whether a batch is applied (and read) all at once.

    **Expiry.** A key whose ``expires_at`` has passed is gone for every read (``get``,
    ``get_versioned``, ``keys``, ``entries``, ``key_counts``), for ``if_version=0`` and for
    ``increment`` (it starts again from 0), even before :meth:`cleanup` removes it physically.
    """

    #: :meth:`get_versioned`, ``if_version`` and a version on every stored key.
    supports_versions: ClassVar[bool] = False
    #: ``expires_at`` on writes, and :meth:`cleanup`.
    supports_expiry: ClassVar[bool] = False
    #: :meth:`increment` in one atomic step.
    supports_increment: ClassVar[bool] = False
    #: :meth:`set_many` and :meth:`delete_many` apply every key or none, and no reader (nor
    #: :meth:`get_many`) ever sees a batch half applied. The defaults, one call per key, do not.
    supports_atomic_many: ClassVar[bool] = False
    #: Calls given a caller's ``session`` join its transaction: they commit with it or roll back
    #: with it, so many calls in one session are all applied or none (``airflow state import``).
    supports_session_transactions: ClassVar[bool] = False

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

    def get_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> dict[str, str]:
        """
        Return the values of those of *keys* stored in *scope*; a key with no value is left out.

        The default calls :meth:`get` per key. Validate with
        :func:`~airflow_shared.state.many.validate_many_keys` before any I/O.
        """
        validate_scope(scope)
        found = {}
        for key in validate_many_keys(keys, "get_many"):
            value = self.get(scope, key, session=session)
            if value is not None:
                found[key] = value
        return found

    def set_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> dict[str, int | None]:
        """
        Store every key-value pair of *values* in *scope*, as :meth:`write` would (same *writer*
        and *expires_at* for all), and return each key's new version (``None`` without versions).

        The default calls :meth:`write` per key, after checking them all: a bad key or value writes
        nothing, but a failure of storage part-way leaves the keys before it written. Backends that
        write a batch at once override it and declare :attr:`supports_atomic_many`.
        """
        validate_scope(scope)
        checked = validate_many_values(values)
        validate_write_options(expires_at, None)
        validate_writer(writer)
        return {
            key: self.write(scope, key, value, writer=writer, expires_at=expires_at, session=session)
            for key, value in checked.items()
        }

    def delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> None:
        """Remove each of *keys* from *scope* (absent keys are no error); the default calls :meth:`delete`."""
        validate_scope(scope)
        for key in validate_many_keys(keys, "delete_many"):
            self.delete(scope, key, session=session)

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

    def write(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int | None:
        """
        Store *value* under *key*, with everything a write can carry; return the key's new version
        (``None`` from a backend that does not keep versions).

        :param writer: who writes (``None``: not known). Task state records ``writer.try_number``
            as :meth:`set_by_try` does; asset state records the whole writer where the backend can.
        :param expires_at: when the key expires (timezone-aware); ``None``: never. Each write
            replaces the key's expiry.
        :param if_version: write only if the stored version is this one (0: only if the key is
            absent or expired); otherwise raise :class:`StateConflictError` with the stored version.

        The default serves backends without versions or expiry: it refuses ``if_version`` and
        ``expires_at`` with :class:`StateCapabilityError` and calls :meth:`set_by_try`. Backends
        that declare a capability override this method.
        """
        validate_write_options(expires_at, if_version)
        if if_version is not None:
            raise StateCapabilityError(self, "versioned writes (if_version)")
        if expires_at is not None:
            raise StateCapabilityError(self, "expiry (expires_at)")
        validate_writer(writer)
        try_number = writer.try_number if writer is not None else None
        self.set_by_try(scope, key, value, try_number=try_number, session=session)
        return None

    def get_versioned(self, scope: StateScope, key: str, *, session: Any = None) -> VersionedValue | None:
        """Return the value stored under *key* with its version, or ``None`` when there is none."""
        raise StateCapabilityError(self, "versions (get_versioned)")

    def increment(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        """
        Add *by* to the JSON integer stored under *key* (an absent or expired key counts as 0) in
        one atomic step, and return the result. Concurrent increments never lose one another.

        The value must be a JSON integer and stay within 64 bits, else ``ValueError`` and nothing is
        written. *writer* and *expires_at* are as for :meth:`write`.

        The default, for backends with versions but no native increment, retries a versioned
        write until no other writer came in between; without versions it raises
        :class:`StateCapabilityError`.
        """
        validate_increment(by)
        validate_write_options(expires_at, None)
        validate_writer(writer)
        if not self.supports_versions:
            raise StateCapabilityError(self, "atomic increments")
        while True:
            stored = self.get_versioned(scope, key, session=session)
            result = incremented(key, stored.value if stored else None, by)
            try:
                self.write(
                    scope,
                    key,
                    str(result),
                    writer=writer,
                    expires_at=expires_at,
                    if_version=stored.version if stored else 0,
                    session=session,
                )
            except StateConflictError:
                continue
            return result

    def cleanup(
        self,
        *,
        now: datetime,
        updated_before: datetime | None = None,
        batch_size: int = 1000,
        dry_run: bool = False,
        session: Any = None,
    ) -> int:
        """
        Remove, physically, every key that expired at or before *now* and, when *updated_before*
        is given, every key last written before it (task and asset state alike); return how many
        were removed, or with *dry_run* how many would be.

        Work in batches of at most *batch_size* keys, each its own short transaction, so that
        reads and writes of other keys carry on meanwhile. Expired keys are already invisible to
        reads: this only reclaims their space.

        The default serves backends without expiry: nothing of theirs can expire, so without
        *updated_before* there is nothing to remove (0); with it, :class:`StateCapabilityError`.
        """
        if updated_before is not None:
            raise StateCapabilityError(self, "removing keys by age (cleanup with updated_before)")
        return 0

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

    def get_entry(self, scope: StateScope, key: str, *, session: Any = None) -> StateEntry | None:
        """
        Return the entry of *key* in *scope* (its value and what :meth:`entries` shows of it), or
        ``None`` when the key is absent or expired.

        What operators read when they name one key (the REST API, ``airflow state get``, each row
        of an import). The default pages :meth:`entries` by the key as prefix, which is correct
        but may read the whole scope to find one key; backends that can read one key with its
        metadata in one round trip override it. A backend that cannot list keys gets the
        :meth:`get` value alone.
        """
        validate_scope(scope)
        validate_key(key)
        try:
            # Keys sort by code point, so a key comes first among the keys it prefixes.
            page = self.entries(scope, key_prefix=key, limit=1, session=session)
        except NotImplementedError:
            value = self.get(scope, key, session=session)
            return None if value is None else StateEntry(key, value)
        found = page.entries[0] if page.entries else None
        return found if found is not None and found.key == key else None

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

    async def awrite(
        self,
        scope: StateScope,
        key: str,
        value: str,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        if_version: int | None = None,
        session: Any = None,
    ) -> int | None:
        """Async :meth:`write`."""
        return await asyncio.to_thread(
            self.write,
            scope,
            key,
            value,
            writer=writer,
            expires_at=expires_at,
            if_version=if_version,
            session=session,
        )

    async def aget_versioned(
        self, scope: StateScope, key: str, *, session: Any = None
    ) -> VersionedValue | None:
        """Async :meth:`get_versioned`."""
        return await asyncio.to_thread(self.get_versioned, scope, key, session=session)

    async def aincrement(
        self,
        scope: StateScope,
        key: str,
        by: int = 1,
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> int:
        """Async :meth:`increment`."""
        return await asyncio.to_thread(
            self.increment, scope, key, by, writer=writer, expires_at=expires_at, session=session
        )

    async def aget_many(
        self, scope: StateScope, keys: Iterable[str], *, session: Any = None
    ) -> dict[str, str]:
        """Async :meth:`get_many`."""
        return await asyncio.to_thread(self.get_many, scope, keys, session=session)

    async def aset_many(
        self,
        scope: StateScope,
        values: Mapping[str, str],
        *,
        writer: StateWriter | None = None,
        expires_at: datetime | None = None,
        session: Any = None,
    ) -> dict[str, int | None]:
        """Async :meth:`set_many`."""
        return await asyncio.to_thread(
            self.set_many, scope, values, writer=writer, expires_at=expires_at, session=session
        )

    async def adelete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> None:
        """Async :meth:`delete_many`."""
        await asyncio.to_thread(self.delete_many, scope, keys, session=session)

    async def adelete(self, scope: StateScope, key: str, *, session: Any = None) -> None:
        """Async :meth:`delete`."""
        await asyncio.to_thread(self.delete, scope, key, session=session)

    async def aclear(self, scope: StateScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        """Async :meth:`clear`."""
        await asyncio.to_thread(self.clear, scope, all_map_indices=all_map_indices, session=session)

    async def akeys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        """Async :meth:`keys`."""
        return await asyncio.to_thread(self.keys, scope, session=session)


def contract_methods() -> tuple[str, ...]:
    """
    The public methods of :class:`BaseStateBackend`, sync and async: what a backend that wraps
    another (to measure, log or trace it) must pass on, each to the same method of the wrapped
    backend. A helper not meant to be overridden is marked ``@typing.final`` and left out.
    """
    return tuple(
        sorted(
            name
            for name, member in vars(BaseStateBackend).items()
            if not name.startswith("_") and callable(member) and not getattr(member, "__final__", False)
        )
    )


def capability_names() -> tuple[str, ...]:
    """
    The capabilities :class:`BaseStateBackend` declares as class attributes (``supports_*``): a
    wrapper must read the same as the backend it wraps on each.
    """
    return tuple(
        sorted(
            name
            for name, member in vars(BaseStateBackend).items()
            if not name.startswith("_") and not callable(member)
        )
    )
