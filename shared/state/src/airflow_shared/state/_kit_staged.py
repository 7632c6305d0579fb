"""The conformance kit's tests of :meth:`BaseStateBackend.apply_commit` (staged writes of a try)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ._kit_support import future, in_threads, now, race_reader, require
from .staged import COMMIT_KEY, StagedCommit, StagedOp, StagedWrite
from .writes import StateCapabilityError, StateWriter

#: The ways task state is emptied between a commit and the same commit sent again: none may make
#: the commit apply twice (clear on success, the task's own clear(), operators' clears, a clear's
#: discard by the next try).
_EMPTYINGS = {
    "clear": lambda backend, ledger: backend.clear(ledger),
    "clear-all-map-indices": lambda backend, ledger: backend.clear(ledger, all_map_indices=True),
    "discard-through-try": lambda backend, ledger: backend.discard_written_through_try(ledger, 1),
}


def _commit(ledger, *writes: StagedWrite) -> StagedCommit:
    writer = StateWriter.task_try(ledger.dag_id, ledger.run_id, ledger.task_id, ledger.map_index, 1)
    return StagedCommit(uuid.uuid4().hex, ledger, writes, writer)


def _require_commits(backend) -> None:
    if not backend.supports_versions:
        pytest.skip(f"{type(backend).__name__} keeps no versions: it cannot record a commit")


class StagedCommitConformance:
    """A try's staged writes: applied together, once per commit id, or not at all."""

    #: False for a store that applies a commit to the committing task's own scope only (Redis
    #: Cluster: one transaction, one hash slot); it must refuse a wider commit, writing nothing.
    commits_span_scopes: bool = True

    def _scopes(self, backend, make_task_scope, make_asset_scope):
        """
        A commit's ledger (a task's scope) and where its other writes go: an asset's scope, where the
        store allows; skipped unless the backend applies commits.
        """
        _require_commits(backend)
        ledger = make_task_scope()
        return ledger, make_asset_scope(1) if self.commits_span_scopes else ledger

    def test_a_commit_wider_than_the_store_allows_is_refused_whole(
        self, backend, make_task_scope, make_asset_scope
    ):
        if self.commits_span_scopes:
            pytest.skip("this store applies a commit to any scopes")
        ledger, asset = make_task_scope(), make_asset_scope(1)
        commit = _commit(
            ledger,
            StagedWrite(ledger, "watermark", StagedOp.SET, "1"),
            StagedWrite(asset, "rows", StagedOp.INCREMENT, by=1),
        )
        with pytest.raises(StateCapabilityError):
            backend.apply_commit(commit)
        assert backend.get(ledger, "watermark") is None
        assert backend.get(asset, "rows") is None

    def test_a_commit_applies_sets_deletes_and_increments_across_scopes(
        self, backend, make_task_scope, make_asset_scope
    ):
        ledger, asset = self._scopes(backend, make_task_scope, make_asset_scope)
        backend.set(ledger, "doomed", '"old"')
        backend.set(asset, "rows", "40")
        commit = _commit(
            ledger,
            StagedWrite(ledger, "watermark", StagedOp.SET, '"2026-12-01"'),
            StagedWrite(ledger, "doomed", StagedOp.DELETE),
            StagedWrite(asset, "rows", StagedOp.INCREMENT, by=2),
            StagedWrite(asset, "fresh", StagedOp.INCREMENT, by=5, expires_at=future()),
        )
        assert backend.apply_commit(commit) is True
        assert backend.get(ledger, "watermark") == '"2026-12-01"'
        assert backend.get(ledger, "doomed") is None
        assert backend.get_many(asset, ["rows", "fresh"]) == {"rows": "42", "fresh": "5"}
        # Its record is kept apart from the task's state, not under the key releases before 0.8 used.
        assert backend.get(ledger, COMMIT_KEY) is None

    def test_the_same_commit_applied_again_changes_nothing(self, backend, make_task_scope, make_asset_scope):
        ledger, asset = self._scopes(backend, make_task_scope, make_asset_scope)
        commit = _commit(
            ledger,
            StagedWrite(asset, "runs", StagedOp.INCREMENT, by=1),
            StagedWrite(ledger, "seen", StagedOp.SET, "1"),
        )
        assert backend.apply_commit(commit) is True
        backend.set(ledger, "seen", "changed since")
        assert backend.apply_commit(commit) is False
        assert backend.get(asset, "runs") == "1"  # not counted twice
        assert backend.get(ledger, "seen") == "changed since"
        # The next try's commit has another id: it applies.
        assert backend.apply_commit(_commit(ledger, StagedWrite(asset, "runs", StagedOp.INCREMENT))) is True
        assert backend.get(asset, "runs") == "2"

    @pytest.mark.parametrize("emptying", sorted(_EMPTYINGS))
    def test_a_commit_sent_again_after_its_task_state_was_emptied_applies_nothing(
        self, backend, make_task_scope, make_asset_scope, emptying
    ):
        ledger, asset = self._scopes(backend, make_task_scope, make_asset_scope)
        commit = _commit(
            ledger,
            StagedWrite(asset, "runs", StagedOp.INCREMENT, by=1),
            StagedWrite(ledger, "seen", StagedOp.SET, "1"),
        )
        assert backend.apply_commit(commit) is True
        _EMPTYINGS[emptying](backend, ledger)
        # What the emptying left ("runs" is gone too where the store keeps it in the task's scope;
        # "seen" stays where nothing records which try wrote it, for the discard to find).
        left = {(scope, key): backend.get(scope, key) for scope, key in ((asset, "runs"), (ledger, "seen"))}
        assert left[(ledger, "seen")] is None or emptying == "discard-through-try"
        assert backend.apply_commit(commit) is False
        assert {(scope, key): backend.get(scope, key) for scope, key in left} == left  # nothing written again

    def test_a_commit_sent_again_after_a_clean_up_by_age_applies_nothing(
        self, backend, make_task_scope, make_asset_scope
    ):
        ledger, asset = self._scopes(backend, make_task_scope, make_asset_scope)
        commit = _commit(ledger, StagedWrite(asset, "runs", StagedOp.INCREMENT, by=1))
        assert backend.apply_commit(commit) is True
        time.sleep(0.1)
        cut = now()
        try:  # every key written before the cut goes, anywhere in a shared store, but not the record
            backend.cleanup(now=cut, updated_before=cut)
        except StateCapabilityError:
            pytest.skip(f"{type(backend).__name__} does not clean up keys by age")
        assert backend.apply_commit(commit) is False
        assert backend.get(asset, "runs") is None  # cleaned up with the rest, and not counted again

    def test_a_refused_increment_applies_nothing_of_the_commit(
        self, backend, make_task_scope, make_asset_scope
    ):
        ledger, asset = self._scopes(backend, make_task_scope, make_asset_scope)
        backend.set(asset, "label", '"not a number"')
        commit = _commit(
            ledger,
            StagedWrite(ledger, "watermark", StagedOp.SET, "7"),
            StagedWrite(asset, "label", StagedOp.INCREMENT, by=1),
        )
        with pytest.raises(ValueError, match="not an integer"):
            backend.apply_commit(commit)
        assert backend.get(ledger, "watermark") is None
        assert backend.get(asset, "label") == '"not a number"'
        # Not recorded either: once the increment can apply, the same commit applies.
        backend.set(asset, "label", "1")
        assert backend.apply_commit(commit) is True
        assert backend.get_many(asset, ["label"]) == {"label": "2"}
        assert backend.get(ledger, "watermark") == "7"

    def test_concurrent_commits_counting_one_asset_all_count(
        self, backend, make_task_scope, make_asset_scope
    ):
        _require_commits(backend)
        if self.commits_span_scopes:
            asset = make_asset_scope(1)
            ledgers = [make_task_scope(task_id=f"task_{n}") for n in range(4)]
        else:  # one scope: the task's own, committed by four tries at once (distinct commit ids)
            asset = make_task_scope()
            ledgers = [asset] * 4
        rounds = 5

        def commit_rounds(n: int) -> None:
            for round_ in range(rounds):
                backend.apply_commit(
                    _commit(
                        ledgers[n],
                        StagedWrite(asset, "total", StagedOp.INCREMENT, by=1),
                        StagedWrite(asset, f"last_of_{n}", StagedOp.SET, str(round_)),
                    )
                )

        in_threads(len(ledgers), commit_rounds)
        assert backend.get(asset, "total") == str(len(ledgers) * rounds)
        assert backend.get_many(asset, [f"last_of_{n}" for n in range(4)]) == {
            f"last_of_{n}": str(rounds - 1) for n in range(4)
        }

    def test_async_commit_matches_sync(self, backend, make_task_scope):
        _require_commits(backend)
        ledger = make_task_scope()
        commit = _commit(ledger, StagedWrite(ledger, "n", StagedOp.INCREMENT, by=3))
        assert asyncio.run(backend.aapply_commit(commit)) is True
        assert asyncio.run(backend.aapply_commit(commit)) is False
        assert backend.get(ledger, "n") == "3"

    def test_an_atomic_commit_is_never_seen_half_applied(self, backend, make_task_scope, make_asset_scope):
        require(backend.supports_atomic_commit, backend, "atomic commits")
        ledger = make_task_scope()
        asset = make_asset_scope(1) if self.commits_span_scopes else ledger
        keys = [f"part-{n}" for n in range(6)]

        def write() -> None:
            for round_ in range(1, 41):
                writes = [StagedWrite(asset, key, StagedOp.SET, str(round_)) for key in keys]
                writes.append(StagedWrite(ledger, "round", StagedOp.SET, str(round_)))
                backend.apply_commit(_commit(ledger, *writes))

        def read() -> str | None:
            # The asset's keys at once, then the task's key: written by the same commits, so the
            # task's key read afterwards is never behind what the asset showed.
            seen = backend.get_many(asset, keys)
            task_round = int(backend.get(ledger, "round") or 0)
            rounds_seen = {int(value) for value in seen.values()}
            if seen and (len(seen) != len(keys) or len(rounds_seen) != 1):
                return f"asset keys {seen}"
            if seen and task_round < min(rounds_seen):
                return f"asset at round {min(rounds_seen)}, task state at {task_round}"
            return None

        race_reader("a commit", write, read)
