"""
What ``airflow state clean`` does in ``[state] object_storage_path``: remove the objects of large
values that no key references any more (a killed writer's, an overwritten or deleted key's, an
expired key's, a deleted dag run's), and never one that a key references or may still reference.

The order is what makes it safe (docs/large-values.md has the proof): the clock is read, then the
objects are listed, then every reference in the store is read; an object is removed only if it is
in none of them and was last modified more than ``[state] object_grace_period`` before that
clock reading. A writer whose reference is not yet stored started its upload less than half the
grace period ago, else its reference is refused (``large_values.check_fresh``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from airflow.utils.session import create_session
from airflow_shared.state import AssetScope, BaseStateBackend, StateScope

from airflow_task_state import config, large_values, object_storage
from airflow_task_state.airflow_db.lookups import NotFound, dag_runs, every_asset, task_scopes_of_run

RUN_PAGE = 500
ENTRY_PAGE = 500


@dataclass(frozen=True)
class Collected:
    """What a collection found: objects removed (or, in a dry run, that would be), and kept."""

    removed: int
    removed_bytes: int
    referenced: int
    too_young: int


def collect(backend: BaseStateBackend, *, dry_run: bool) -> Collected:
    """Remove (*dry_run*: count) the objects no key references, older than the grace period."""
    cutoff = datetime.now(UTC) - config.object_grace_period()  # read before listing: the proof needs it
    stored = list(object_storage.listing())
    if not stored:
        return Collected(0, 0, 0, 0)
    referenced = set(referenced_paths(backend))
    removed = removed_bytes = kept = young = 0
    for found in stored:
        if found.path in referenced:
            kept += 1
        elif found.modified_at >= cutoff:
            young += 1
        else:
            if not dry_run:
                object_storage.remove(found.path)
            removed, removed_bytes = removed + 1, removed_bytes + found.size
    return Collected(removed, removed_bytes, kept, young)


def referenced_paths(backend: BaseStateBackend) -> Iterator[str]:
    """
    The object of every reference in the store: every task instance of every dag run, every asset.
    Read from the backend as stored, so keys a clear left for a next try to discard still count.
    """
    for scope in _scopes_with_state(backend):
        offset = 0
        while True:
            page = backend.entries(scope, offset=offset, limit=ENTRY_PAGE)
            for entry in page.entries:
                if entry.value.startswith(large_values.TEXT_PREFIX):
                    yield _path_of(entry.value)
            offset += len(page.entries)
            if not page.entries or offset >= page.total:
                break


def _path_of(text: str) -> str:
    try:
        return large_values.parse(json.loads(text)).path
    except ValueError:  # malformed: keeps nothing, and reads of it fail already
        return ""


def _scopes_with_state(backend: BaseStateBackend) -> Iterator[StateScope]:
    for dag_id, run_id in dag_runs(None, None, page_size=RUN_PAGE):
        with create_session() as session:
            try:
                scopes: list[StateScope] = list(task_scopes_of_run(dag_id, run_id, session))
            except NotFound:  # deleted since it was listed: its state went with it
                continue
        yield from _holding(backend, scopes)
    with create_session() as session:
        assets: list[StateScope] = [AssetScope(asset.asset_id) for asset in every_asset(session)]
    yield from _holding(backend, assets)


def _holding(backend: BaseStateBackend, scopes: list[StateScope]) -> list[StateScope]:
    if not scopes:
        return []
    counts = backend.key_counts(scopes)
    return [scope for scope, count in zip(scopes, counts, strict=True) if count]
