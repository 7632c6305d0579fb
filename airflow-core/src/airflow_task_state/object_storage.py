"""
The objects of large values in ``[state] object_storage_path``: written whole under a fresh random
name and hashed as they go (:func:`write` streams, :func:`write_file` uploads a local file with the
filesystem's own ``put_file``), read back checked against the reference's size and digest
(:func:`read` streams, :func:`read_into` downloads to a path with ``get_file``), copied for an
import (:func:`copy`), listed and removed by ``airflow state clean`` (:func:`listing`, :func:`remove`).

Memory stays flat: streams move chunks of :data:`CHUNK_BYTES`, and the digest (BLAKE3 for new
objects, sha256 for references written before it: :data:`..large_values.ALGORITHMS`) runs in a
thread beside the I/O (both release the GIL), so it adds no time while it is faster than the storage.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import blake3

from airflow_task_state import config
from airflow_task_state.exceptions import LargeValueCorruptedError, LargeValueError, StateConfigurationError
from airflow_task_state.large_values import ALGORITHMS, KINDS, NAME, Reference

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

CHUNK_BYTES = 8 * 1024 * 1024

__all__ = [
    "CHUNK_BYTES",
    "base",
    "configured",
    "copy",
    "listing",
    "read",
    "read_into",
    "remove",
    "write",
    "write_file",
]


def configured() -> bool:
    return bool(config.object_storage_path())


def base() -> ObjectStoragePath:
    """``[state] object_storage_path`` as an ``ObjectStoragePath``; refused when it is not set."""
    text = config.object_storage_path()
    if not text:
        raise StateConfigurationError(
            "large values and files need [state] object_storage_path (e.g. s3://conn_id@bucket/prefix or "
            "file:///shared/airflow-state); it is not set here"
        )
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(text)


class _Digest(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
    def hexdigest(self) -> str: ...


def new_digest(algorithm: str = ALGORITHMS[0]) -> _Digest:
    """An empty digest of *algorithm*: BLAKE3 for new objects, sha256 for references made before it."""
    if algorithm == "blake3":
        return blake3.blake3()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"no digest named {algorithm!r}; large values use one of {ALGORITHMS}")


class _Hasher:
    """The digest and size of chunks, each hashed in a thread while the caller moves the next one."""

    def __init__(self, algorithm: str = ALGORITHMS[0]) -> None:
        self._digest = new_digest(algorithm)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="state-object-hash")
        self._pending: Future[object] | None = None
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self._wait()  # at most one chunk being hashed: memory stays at a few chunks
        self._pending = self._thread.submit(self._digest.update, chunk)
        self.size += len(chunk)

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def hexdigest(self) -> str:
        self._wait()
        return self._digest.hexdigest()

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def chunks_of(source: BinaryIO) -> Iterator[bytes]:
    """*source*'s bytes, a chunk at a time (any readable binary file object)."""
    while chunk := source.read(CHUNK_BYTES):
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"expected a binary file object (open(..., 'rb')), got chunks of {type(chunk)}")
        yield bytes(chunk)


def write(chunks: Iterable[bytes], kind: str) -> Reference:
    """
    Write *chunks* to a new object under the base, completely, and return its reference; nothing
    is referenced yet (the caller writes the reference). A failed write leaves at most an
    unreferenced object, which ``airflow state clean`` collects.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    root = base()
    started_at = datetime.now(UTC)  # before the first byte: the collection rule counts from here
    path = root / uuid.uuid4().hex
    hasher = _Hasher()
    try:
        with path.open("wb") as out:
            for chunk in chunks:
                hasher.add(chunk)
                out.write(chunk)
        digest = hasher.hexdigest()
    finally:
        hasher.close()
    return Reference(kind, str(path), hasher.size, digest, started_at)


def write_file(local: str | os.PathLike[str]) -> Reference:
    """
    Upload the local file *local* to a new object with the filesystem's own ``put_file`` (a kernel
    copy for local files; concurrent multipart uploads on S3), hashing the file in a thread beside
    it. The digest is of the file as this thread reads it: a file changed during the upload makes
    every later read fail (``LargeValueCorruptedError``), never return other bytes.
    """
    root = base()
    started_at = datetime.now(UTC)  # before the first byte: the collection rule counts from here
    path = root / uuid.uuid4().hex
    with ThreadPoolExecutor(1, thread_name_prefix="state-object-hash") as hasher:
        hashed = hasher.submit(_digest_of, local, ALGORITHMS[0])
        path.fs.put_file(os.fspath(local), path.path)
        digest, size = hashed.result()
    return Reference("bytes", str(path), size, digest, started_at)


def _digest_of(local: str | os.PathLike[str], algorithm: str) -> tuple[str, int]:
    """The digest and size of a local file, read into one reused buffer (no chunk is copied)."""
    digest, size = new_digest(algorithm), 0
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(local, "rb", buffering=0) as source:
        while read := source.readinto(buffer):
            digest.update(view[:read])
            size += read
    return digest.hexdigest(), size


def _resolve(reference: Reference) -> ObjectStoragePath:
    """The object *reference* names, which must be under the configured base (never anywhere else)."""
    root = base()
    path = root / reference.name
    if str(path) != reference.path or not NAME.fullmatch(reference.name):
        raise LargeValueError(
            f"large value at {reference.path} is outside [state] object_storage_path ({root}); it was "
            "written with another setting: set object_storage_path back, or copy the objects there"
        )
    return path


def read(reference: Reference) -> Iterator[bytes]:
    """
    The object's bytes, a chunk at a time, checked as they come: ``LargeValueCorruptedError`` as
    soon as there are more bytes than the reference says, and at the end if there are fewer or the
    digest differs. The last chunk is held back until the check passes, so a read that ends without
    an error has read the value as written, and a corrupted one never delivers all of it.
    """
    path = _resolve(reference)
    hasher = _Hasher(reference.algorithm)
    held: bytes | None = None
    try:
        try:
            source = path.open("rb")
        except FileNotFoundError:
            raise LargeValueCorruptedError(
                f"large value object {reference.path} is missing: removed by hand, or by `airflow state "
                "clean` with a grace period shorter than the upload"
            ) from None
        with source:
            while chunk := source.read(CHUNK_BYTES):
                hasher.add(chunk)
                if hasher.size > reference.size:
                    raise _corrupted(reference, f"it holds more than the {reference.size} bytes written")
                if held is not None:
                    yield held
                held = chunk
        digest = hasher.hexdigest()
    finally:
        hasher.close()
    _check(reference, digest, hasher.size)
    if held is not None:
        yield held


def _corrupted(reference: Reference, what: str) -> LargeValueCorruptedError:
    return LargeValueCorruptedError(
        f"large value object {reference.path} does not read back as written: {what}. It was changed "
        "after it was written; the value is lost, write it again"
    )


def copy(reference: Reference) -> Reference:
    """
    A new object holding what *reference* names (checked as it is read), and its reference, with
    the current digest (an import of an old sha256 reference gets a BLAKE3 one).
    """
    return write(read(reference), reference.kind)


def read_all(reference: Reference) -> bytes:
    """The whole object in memory, checked (JSON values are decoded whole anyway)."""
    return b"".join(read(reference))


def read_into(reference: Reference, destination: str | os.PathLike[str] | BinaryIO) -> None:
    """
    Stream the object into a local file *path* (written beside it and renamed only once checked,
    so a failed read leaves the path as it was) or a writable binary file object.
    """
    if not isinstance(destination, str | os.PathLike):
        for chunk in read(reference):
            destination.write(chunk)
        return
    partial = f"{os.fspath(destination)}.partial-{uuid.uuid4().hex[:8]}"
    try:
        path = _resolve(reference)
        if path.protocol in LOCAL_PROTOCOLS:
            _copy_local_checked(reference, path, partial)
        else:  # the provider's download (concurrent ranges on S3), then the file hashed once
            try:
                path.fs.get_file(path.path, partial)
            except FileNotFoundError:
                raise LargeValueCorruptedError(f"large value object {reference.path} is missing") from None
            with open(partial, "rb", buffering=0) as downloaded:
                size, digest = os.fstat(downloaded.fileno()).st_size, new_digest(reference.algorithm)
                _hash_mapped(digest, downloaded.fileno(), 0, size)
            _check(reference, digest.hexdigest(), size)
        os.replace(partial, destination)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


#: Filesystems whose objects are files on this machine: copied by the kernel while this thread
#: hashes the object where it lies. Others (S3, GCS...) download, then the file is hashed once.
LOCAL_PROTOCOLS = frozenset({"file", "local"})


def _copy_local_checked(reference: Reference, path: ObjectStoragePath, partial: str) -> None:
    """
    The filesystem's own ``get_file`` into *partial* (a kernel copy, in a thread), while this
    thread hashes the object itself from its mapped pages: two cores, no byte copied into Python.
    The object's inode, size and change time read before and after prove nothing wrote it in
    between, so the copy holds the bytes hashed (hashing the copy as it grows was twice as slow:
    the reader and the kernel's writer contend for the same new pages).
    """
    try:
        with open(path.path, "rb", buffering=0) as source:
            before = os.fstat(source.fileno())
            with ThreadPoolExecutor(1, thread_name_prefix="state-object-download") as downloader:
                copied = downloader.submit(path.fs.get_file, path.path, partial)
                digest = new_digest(reference.algorithm)
                _hash_mapped(digest, source.fileno(), 0, before.st_size)
                copied.result()
        after = os.stat(path.path)
    except FileNotFoundError:  # removed before the read, or during it
        raise LargeValueCorruptedError(f"large value object {reference.path} is missing") from None
    if _identity(after) != _identity(before) or os.path.getsize(partial) != before.st_size:
        raise _corrupted(reference, "it was written to while it was being read")
    _check(reference, digest.hexdigest(), before.st_size)


def _identity(status: os.stat_result) -> tuple[int, int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _hash_mapped(digest: _Digest, fileno: int, start: int, end: int) -> None:
    """
    Hash bytes *start* to *end* of an open file (*start* a multiple of :data:`CHUNK_BYTES`) from its
    pages mapped a window at a time: the digest reads the page cache itself, with no copy into
    this process (a copy of 1 GiB costs as much time as hashing it), and one window is resident at
    most. Only for files this module writes and nothing truncates: a mapped page cut off a file
    would kill the process (SIGBUS), so a task's own files are read, not mapped.
    """
    while start < end:
        length = min(CHUNK_BYTES, end - start)
        with (
            mmap.mmap(fileno, length, access=mmap.ACCESS_READ, offset=start) as window,
            memoryview(window) as view,
        ):
            digest.update(view)
        start += length


def _check(reference: Reference, digest: str, size: int) -> None:
    if size != reference.size:
        raise _corrupted(reference, f"it holds {size} bytes, {reference.size} were written")
    if digest != reference.digest:
        raise _corrupted(reference, f"its {reference.algorithm} is {digest}, {reference.digest} was written")


@dataclass(frozen=True)
class StoredObject:
    """An object under the base as a listing sees it."""

    path: str
    size: int
    modified_at: datetime


def listing() -> Iterator[StoredObject]:
    """Every object named like a large value's under the base, with its last-modified time."""
    root = base()
    root.fs.invalidate_cache(root.path)  # a cached listing would miss what was written since
    try:
        found = root.fs.ls(root.path, detail=True)
    except FileNotFoundError:
        return
    for info in found:
        name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
        if info.get("type") != "file" or not NAME.fullmatch(name):
            continue
        yield StoredObject(str(root / name), int(info.get("size") or 0), _modified_at(info))


def _modified_at(info: dict[str, Any]) -> datetime:
    """When the storage says the object was last written (local files: mtime; S3: LastModified...)."""
    for field in ("LastModified", "last_modified", "mtime", "updated", "modified"):
        moment = info.get(field)
        if isinstance(moment, datetime):
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        if isinstance(moment, int | float):
            return datetime.fromtimestamp(moment, UTC)
        if isinstance(moment, str) and moment:
            parsed = datetime.fromisoformat(moment.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    # No time at all: treated as written now, so it is never collected by mistake.
    return datetime.now(UTC)


def remove(path: str) -> None:
    """Remove the object at *path* (from :func:`listing`); one already gone is not an error."""
    from airflow.sdk import ObjectStoragePath

    ObjectStoragePath(path).unlink(missing_ok=True)
