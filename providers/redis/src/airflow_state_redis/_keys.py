"""
Where each scope's state lives in Redis (docs/redis.md, "Key layout", shows every name and why).

The braces are a Redis Cluster hash tag: every key of one task (or one asset: its metadata HASH is
tagged with the value HASH's whole name, which has no braces) lands on one slot, as scripts require.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from airflow_shared.state import AssetScope, TaskScope

#: Suffix of the per-task SET of map indexes; a map index is an integer, so it cannot clash.
MAP_INDEXES_SUFFIX = "map-indexes"

#: Suffix of a task HASH's metadata HASH (``<task_hash>:meta``); a map index is an integer, so
#: ``<base>:<map_index>:meta`` can never be another task HASH or the map-index SET.
META_SUFFIX = ":meta"


def _glob_escape(text: str) -> str:
    """*text* as a literal in a SCAN MATCH pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def validate_prefix(prefix: str) -> None:
    """Refuse prefixes that would break the layout (empty, or carrying a stray hash tag)."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"[state_redis] key_prefix must be a non-empty string, got {prefix!r}")
    # Redis Cluster hashes the first {...} of a key; a brace in the prefix would move it.
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"[state_redis] key_prefix must not contain '{{' or '}}', got {prefix!r}")


def require_dag_run_uid(scope: TaskScope) -> str:
    """Return the scope's ``dag_run_uid``; refuse a scope without one (called before any I/O)."""
    if scope.dag_run_uid is None:
        raise ValueError(
            "The Redis state backend needs TaskScope.dag_run_uid, the identity of this incarnation of "
            f"the dag run (dag_id={scope.dag_id!r}, run_id={scope.run_id!r}), so that a run deleted "
            "and created again with the same run_id starts with empty state. In Airflow server "
            "processes build the scope with airflow_task_state.task_scope(dag_id, run_id, task_id, "
            "map_index); the state API fills it itself."
        )
    return scope.dag_run_uid


class KeyLayout:
    """Builds the Redis key names for one key prefix."""

    def __init__(self, prefix: str) -> None:
        validate_prefix(prefix)
        self.prefix = prefix

    def task_base(self, scope: TaskScope) -> str:
        """The part shared by every key of a task in one incarnation of a run (hashes and index set)."""
        parts = (scope.dag_id, scope.run_id, require_dag_run_uid(scope), scope.task_id)
        tag = ":".join(quote(part, safe="") for part in parts)
        return f"{self.prefix}:task:{{{tag}}}"

    def task_hash(self, scope: TaskScope) -> str:
        return f"{self.task_base(scope)}:{scope.map_index}"

    def task_index(self, scope: TaskScope) -> str:
        return f"{self.task_base(scope)}:{MAP_INDEXES_SUFFIX}"

    def asset_hash(self, scope: AssetScope) -> str:
        return f"{self.prefix}:asset:{scope.asset_id}"

    def names(self, scope: TaskScope | AssetScope) -> list[str]:
        """``[value hash, metadata hash]`` of a scope: the KEYS every reading script takes."""
        if isinstance(scope, TaskScope):
            name = self.task_hash(scope)
            return [name, name + META_SUFFIX]
        name = self.asset_hash(scope)
        # The asset hash has no {...}: its whole name as this key's hash tag puts both on one slot.
        return [name, f"{self.prefix}:asset-meta:{{{name}}}"]

    def call_marker(self, scope: TaskScope | AssetScope, call_id: str) -> str:
        """The key that marks one write call as done (``_scripts._once``), in the scope's slot."""
        if isinstance(scope, TaskScope):
            return f"{self.task_base(scope)}:op:{call_id}"
        return f"{self.prefix}:asset-op:{{{self.asset_hash(scope)}}}:{call_id}"

    def commit_record(self, scope: TaskScope, commit_id: str) -> str:
        """
        The STRING a commit of *scope*'s try records itself in: in the task's slot, so that a commit
        of the task's own state is one transaction in Cluster mode too, and outside every hash, so
        that no clear or discard of the task's state removes it (it expires by itself).
        """
        return f"{self.task_base(scope)}:commit:{quote(commit_id, safe='')}"

    # --- finding every metadata hash (for cleanup, which is the only caller that scans) -------

    def metadata_patterns(self) -> list[tuple[str, re.Pattern[str]]]:
        """``(SCAN MATCH pattern, exact shape)`` of task and of asset metadata hash names."""
        glob, literal = _glob_escape(self.prefix), re.escape(self.prefix)
        return [
            (
                f"{glob}:task:{{*}}:*{META_SUFFIX}",
                re.compile(rf"{literal}:task:\{{[^{{}}]*\}}:-?\d+{re.escape(META_SUFFIX)}"),
            ),
            (
                f"{glob}:asset-meta:{{{glob}:asset:*}}",
                re.compile(rf"{literal}:asset-meta:\{{{literal}:asset:\d+\}}"),
            ),
        ]

    @staticmethod
    def clean_keys(meta_name: str) -> tuple[list[str], str]:
        """KEYS and map index of the CLEAN script for the metadata HASH *meta_name*."""
        if meta_name.endswith(META_SUFFIX):  # task state: "<base>:<map index>:meta"
            name = meta_name.removesuffix(META_SUFFIX)
            base, _, map_index = name.rpartition(":")
            return [name, meta_name, f"{base}:{MAP_INDEXES_SUFFIX}"], map_index
        # An asset's metadata HASH is tagged with its value HASH's whole name.
        return [meta_name[meta_name.index("{") + 1 : -1], meta_name], ""
