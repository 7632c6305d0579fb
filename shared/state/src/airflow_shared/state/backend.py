"""The abstract class every state backend implements."""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, ParamSpec, TypeVar

from .entries import StateEntry, StateEntryPage, page_of_keys, validate_listing
from .many import MAX_MANY_KEYS, validate_many_keys, validate_many_values
from .scopes import StateScope, TaskScope
from .staged import COMMIT_RECORD_SECONDS, StagedCommit, StagedOp
from .validation import validate_key, validate_scope
from .writes import (
    StateCapabilityError,
    StateConflictError,
    StateWriter,
    VersionedValue,
    incremented,
    validate_increment,
    validate_write,
)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _in_thread(sync: Callable[_P, _R]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """The async twin of the contract method *sync*: this backend's own *sync*, in a worker thread."""
    name = sync.__name__

    async def in_thread(self: BaseStateBackend, *args: Any, **kwargs: Any) -> Any:
        # to_thread copies the caller's context variables into the thread.
        return await asyncio.to_thread(getattr(self, name), *args, **kwargs)

    in_thread.__name__, in_thread.__qualname__ = f"a{name}", f"BaseStateBackend.a{name}"
    in_thread.__doc__ = f"Async :meth:`{name}`, run in a worker thread unless overridden."
    return in_thread  # type: ignore[return-value]  # self is among _P


class BaseStateBackend(ABC):
    """
    Storage for task and asset state; docs/writing-a-backend.md is the guide.

    Every method takes a keyword-only ``session``: SQLAlchemy backends join the caller's session
    (leaving the commit to it), others ignore it. An undeclared capability raises
    :class:`StateCapabilityError`, never a silent fallback. A key whose ``expires_at`` has passed is
    gone for every read, for ``if_version=0`` and for ``increment``, even before :meth:`cleanup`.
    """

    #: :meth:`get_versioned`, ``if_version`` and a version on every stored key.
    supports_versions: ClassVar[bool] = False
    #: ``expires_at`` on writes, and :meth:`cleanup`.
    supports_expiry: ClassVar[bool] = False
    #: :meth:`increment` in one atomic step.
    supports_increment: ClassVar[bool] = False
    #: :meth:`set_many` and :meth:`delete_many` apply every key or none, never seen half applied.
    supports_atomic_many: ClassVar[bool] = False
    #: Calls given a caller's ``session`` commit or roll back with it (``airflow state import``).
    supports_session_transactions: ClassVar[bool] = False
    #: :meth:`apply_commit` applies a commit's writes to every scope as one step, never seen half applied.
    supports_atomic_commit: ClassVar[bool] = False

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
        """Remove every key of *scope* (with *all_map_indices*, of every map index of a task scope's task)."""

    def get_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> dict[str, str]:
        """Return the values of those of *keys* stored in *scope*; a key with no value is left out."""
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
        """Store each pair as :meth:`write` would; return their versions. Default: key by key, not atomic."""
        validate_scope(scope)
        checked = validate_many_values(values)
        validate_write(writer, expires_at)
        return {
            key: self.write(scope, key, value, writer=writer, expires_at=expires_at, session=session)
            for key, value in checked.items()
        }

    def delete_many(self, scope: StateScope, keys: Iterable[str], *, session: Any = None) -> None:
        """Remove each of *keys* from *scope* (absent keys are no error)."""
        validate_scope(scope)
        for key in validate_many_keys(keys, "delete_many"):
            self.delete(scope, key, session=session)

    def set_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        """:meth:`set` by *try_number* (``None``: asset state, or not a task try); the default ignores it."""
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
        Store *value* under *key*; return the key's new version (``None`` without versions).

        :param writer: who writes; task state records its try, asset state the whole writer.
        :param expires_at: when the key expires (timezone-aware; ``None``: never), replaced by each write.
        :param if_version: write only over this stored version (0: key absent or expired), else
            raise :class:`StateConflictError`.
        """
        try_number = validate_write(writer, expires_at, if_version)
        if if_version is not None:
            raise StateCapabilityError(self, "versioned writes (if_version)")
        if expires_at is not None:
            raise StateCapabilityError(self, "expiry (expires_at)")
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
        Atomically add *by* to the JSON integer under *key* (absent or expired: 0); return the result.
        A value that is not a 64-bit integer, or would leave that range, raises ``ValueError``.
        The default retries versioned writes until no other writer came in between.
        """
        validate_increment(by)
        validate_write(writer, expires_at)
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

    def apply_commit(self, commit: StagedCommit, *, session: Any = None) -> bool:
        """
        Apply every write of *commit* unless a commit of the same id was applied before; return
        whether this call applied it. A write no backend can apply (an increment of a key holding no
        integer) raises ``ValueError`` before any write. The default records the commit under key
        ``commit_id`` of ``commit.record_scope`` (which no clear of a task instance reaches) with a
        write made only if that key is absent, then applies the writes one by one with *session*:
        atomic only when that session's transaction makes it so. A backend that keeps the record
        elsewhere must keep it where no ``clear``, ``discard_written_through_try`` or clean-up by
        age of a task instance's state removes it, for :data:`COMMIT_RECORD_SECONDS`.
        """
        if not isinstance(commit, StagedCommit):
            raise TypeError(f"commit must be a StagedCommit, got {type(commit).__name__}")
        if not self.supports_versions:
            raise StateCapabilityError(self, "staged writes (a commit is recorded with a versioned write)")
        # Every increment is checked first, so a refused one leaves the others unwritten too.
        for write in commit.writes:
            if write.op is StagedOp.INCREMENT:
                incremented(write.key, self.get(write.scope, write.key, session=session), write.by)
        if self.get(commit.record_scope, commit.commit_id, session=session) is not None:
            return False
        try:
            self.write(
                commit.record_scope,
                commit.commit_id,
                commit_record(commit.commit_id),
                expires_at=commit_record_expiry(self),
                if_version=0,
                session=session,
            )
        except StateConflictError:
            return False  # the same commit, sent again, recorded itself in between
        for write in commit.in_lock_order():
            if write.op is StagedOp.DELETE:
                self.delete(write.scope, write.key, session=session)
                continue
            options: dict[str, Any] = {"writer": commit.writer, "expires_at": write.expires_at}
            if write.op is StagedOp.SET:
                assert write.value is not None  # checked by StagedWrite
                self.write(write.scope, write.key, write.value, **options, session=session)
            else:
                self.increment(write.scope, write.key, write.by, **options, session=session)
        return True

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
        Physically remove every key expired at *now* (and, with *updated_before*, every key last
        written before it); return how many (with *dry_run*: would be). Work in short transactions
        of at most *batch_size* keys, so other reads and writes carry on meanwhile.
        """
        if updated_before is not None:
            raise StateCapabilityError(self, "removing keys by age (cleanup with updated_before)")
        return 0

    def discard_written_through_try(self, scope: TaskScope, try_number: int, *, session: Any = None) -> int:
        """
        Remove every key of the task *scope* last written by a try numbered *try_number* or lower
        (keys written outside a try stay); return how many. A new try calls it when a try it follows
        was cleared after success, so the clear starts the task afresh; a second call removes nothing.

        The default lists with :meth:`entries`, then deletes: not atomic, so a key that a newer try
        rewrites between the two steps can be lost; a backend that can do it in one step should.
        """
        validate_discard(scope, try_number)
        try:
            listed = self.entries(scope, session=session).entries
        except NotImplementedError:  # listing is optional: nothing records which try wrote a key
            return 0
        doomed = [
            entry.key
            for entry in listed
            if entry.updated_by_try is not None and entry.updated_by_try <= try_number
        ]
        for start in range(0, len(doomed), MAX_MANY_KEYS):
            self.delete_many(scope, doomed[start : start + MAX_MANY_KEYS], session=session)
        return len(doomed)

    def keys(self, scope: StateScope, *, session: Any = None) -> list[str]:
        """Return the keys stored in *scope*, sorted. Optional: the default raises ``NotImplementedError``."""
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
        A page of *scope*'s entries sorted by key (code point), only keys starting with *key_prefix*,
        skipping *offset*, at most *limit*, with the total that matched: what operators see.
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
        """The entry of *key* as :meth:`entries` shows it, or ``None`` (default: entries by key as prefix)."""
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
        """Return how many keys each of *scopes* holds, in the same order."""
        return [len(self.keys(scope, session=session)) for scope in scopes]

    async def aset_by_try(
        self, scope: StateScope, key: str, value: str, *, try_number: int | None, session: Any = None
    ) -> None:
        """Async :meth:`set_by_try`: an overridden one in a thread (keeping the try), else :meth:`aset`."""
        if type(self).set_by_try is BaseStateBackend.set_by_try:
            await self.aset(scope, key, value, session=session)
        else:
            await asyncio.to_thread(
                self.set_by_try, scope, key, value, try_number=try_number, session=session
            )

    # The other async twins: the sync method of this instance, run in a worker thread.
    aget = _in_thread(get)
    aset = _in_thread(set)
    adelete = _in_thread(delete)
    aclear = _in_thread(clear)
    awrite = _in_thread(write)
    aget_versioned = _in_thread(get_versioned)
    aincrement = _in_thread(increment)
    aget_many = _in_thread(get_many)
    aset_many = _in_thread(set_many)
    adelete_many = _in_thread(delete_many)
    akeys = _in_thread(keys)
    aapply_commit = _in_thread(apply_commit)


def commit_record(commit_id: str) -> str:
    """The value of a commit's record: its id, as the JSON string every reader decodes."""
    return json.dumps(commit_id)


def commit_record_expiry(backend: BaseStateBackend) -> datetime | None:
    """When a commit's record expires (``None`` on a backend without expiry)."""
    if not backend.supports_expiry:
        return None
    return datetime.now(UTC) + timedelta(seconds=COMMIT_RECORD_SECONDS)


def validate_discard(scope: object, try_number: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``discard_written_through_try`` may run with these."""
    validate_scope(scope)
    if not isinstance(scope, TaskScope):
        raise TypeError(f"only task state records the try that wrote it, got {type(scope).__name__}")
    if not isinstance(try_number, int) or isinstance(try_number, bool):
        raise TypeError(f"try_number must be an int, got {type(try_number).__name__}: {try_number!r}")
    if try_number < 0:
        raise ValueError(f"try_number must not be negative, got {try_number}")


def _public_members() -> list[tuple[str, Any]]:
    return sorted(
        (name, member) for name, member in vars(BaseStateBackend).items() if not name.startswith("_")
    )


def contract_methods() -> tuple[str, ...]:
    """The public methods of :class:`BaseStateBackend` (not ``@final``): what a wrapper must pass on."""
    return tuple(
        name
        for name, member in _public_members()
        if callable(member) and not getattr(member, "__final__", False)
    )


def capability_names() -> tuple[str, ...]:
    """The capabilities (``supports_*``) of :class:`BaseStateBackend`: a wrapper reads as its backend."""
    return tuple(name for name, member in _public_members() if not callable(member))
