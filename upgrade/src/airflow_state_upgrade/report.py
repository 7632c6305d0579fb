"""What a run did, or would do: counts per table, conflicts, rows that cannot move, notes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

# The rows of a conflict or refusal list printed as a table; JSON output always has them all.
LISTED_ROWS = 20


@dataclass
class Counts:
    #: Rows of our table.
    read: int = 0
    #: Written into Airflow 3.3's table (with --dry-run: would be).
    moved: int = 0
    #: Already in Airflow 3.3's table with the same value (moved by an earlier run).
    unchanged: int = 0
    #: In Airflow 3.3's table with another value written after ours (by a 3.3 task): kept.
    newer_in_airflow33: int = 0
    #: Moved by an earlier, complete run, and deleted in Airflow 3.3 since: not brought back.
    deleted_in_airflow33: int = 0
    #: In Airflow 3.3's table with another value written before ours, which was kept.
    conflicts: int = 0
    #: In Airflow 3.3's table with another value, replaced by ours (--overwrite).
    overwritten: int = 0
    #: Expired in our table: invisible to every read of ours, so not moved.
    expired: int = 0
    #: Records of committed staged writes (:mod:`.records`): bookkeeping that makes a retried
    #: commit count once, which Airflow 3.3 has no use for, so not moved.
    commit_records: int = 0
    #: Rows Airflow 3.3's table cannot hold (the reasons are listed).
    unmovable: int = 0
    # Notes on the rows this run wrote (said in sentences by Report._notes).
    never_expire: int = 0
    expiry_removed: int = 0
    inactive_asset: int = 0
    over_value_limit: int = 0


@dataclass(frozen=True)
class RowProblem:
    table: str
    scope: dict[str, Any]
    key: str
    reason: str

    def line(self) -> str:
        where = ", ".join(f"{name}={value!r}" for name, value in self.scope.items())
        return f"  {self.table}: {where}, key={self.key!r}: {self.reason}"


@dataclass
class Report:
    dry_run: bool
    overwrite: bool
    tables: dict[str, Counts] = field(default_factory=dict)
    conflicts: list[RowProblem] = field(default_factory=list)
    unmovable: list[RowProblem] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    #: When an earlier run completed the move (from then on, deleted keys stay deleted).
    moved_at: datetime | None = None

    @property
    def complete(self) -> bool:
        """Every live row of ours is (or, in a dry run, would be) in Airflow 3.3's store with our value."""
        return not self.unmovable and (self.overwrite or not self.conflicts)

    def as_json(self) -> str:
        document = {
            "dry_run": self.dry_run,
            "complete": self.complete,
            "tables": {name: asdict(counts) for name, counts in self.tables.items()},
            "conflicts": [asdict(problem) for problem in self.conflicts],
            "unmovable": [asdict(problem) for problem in self.unmovable],
            "dropped": self.dropped,
            "moved_at": self.moved_at.isoformat() if self.moved_at else None,
        }
        return json.dumps(document, indent=2, default=str)

    def as_table(self) -> str:
        # The counts up to unmovable; the notes' counts after it are said in sentences.
        names = [counter.name for counter in fields(Counts)]
        columns = names[: names.index("unmovable") + 1]
        titles = {
            "moved": "would move" if self.dry_run else "moved",
            "newer_in_airflow33": "newer in 3.3",
            "deleted_in_airflow33": "deleted in 3.3",
            "commit_records": "commit records",
        }
        header = ["table", *(titles.get(c, c) for c in columns)]
        rows = [[name, *(str(getattr(counts, c)) for c in columns)] for name, counts in self.tables.items()]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
            for row in [header, *rows]
        ]
        lines += self._notes()
        lines += self._problems(
            self.conflicts,
            "Conflicts: these keys hold another value in Airflow 3.3's store, written before ours. "
            + (
                "Ours replaced it (--overwrite)."
                if self.overwrite
                else "Airflow 3.3's value was kept; run again with --overwrite to replace it with ours."
            ),
        )
        lines += self._problems(
            self.unmovable, "Cannot move: Airflow 3.3's table cannot hold these rows; they stay in ours."
        )
        if self.dropped:
            lines.append(f"Dropped: {', '.join(self.dropped)}.")
        return "\n".join(lines)

    def _notes(self) -> list[str]:
        task = self.tables.get("task_state", Counts())
        asset = self.tables.get("asset_state", Counts())
        notes = []
        if newer := task.newer_in_airflow33 + asset.newer_in_airflow33:
            notes.append(
                f"{newer} key(s) hold a value that Airflow 3.3 wrote after ours: it is newer and "
                "was kept (--overwrite never replaces a newer value)."
            )
        if self.moved_at:
            deleted = task.deleted_in_airflow33 + asset.deleted_in_airflow33
            notes.append(
                f"The move completed at {self.moved_at:%Y-%m-%d %H:%M:%S} UTC; {deleted} key(s) "
                "moved then were deleted in Airflow 3.3 since, and stay deleted."
            )
        if task.never_expire:
            notes.append(
                f"{task.never_expire} task key(s) have no expiry: Airflow 3.3 keeps them until their "
                "dag run is deleted, as airflow-task-state did ([state_store] default_retention_days "
                "applies to new writes only)."
            )
        if asset.expiry_removed:
            notes.append(
                f"{asset.expiry_removed} asset key(s) had an expiry: Airflow 3.3's asset state never "
                f"expires, so they {'would move' if self.dry_run else 'moved'} without one. Delete "
                "them when they are no longer needed."
            )
        if asset.inactive_asset:
            notes.append(
                f"{asset.inactive_asset} asset key(s) belong to assets no DAG uses any more: Airflow "
                "3.3's scheduler deletes the state of inactive assets."
            )
        if over_limit := task.over_value_limit + asset.over_value_limit:
            notes.append(
                f"{over_limit} value(s) are longer than Airflow 3.3's [state_store] "
                "max_value_storage_bytes: 3.3 reads them, but its REST API refuses to write such a "
                "value and its task side logs a warning."
            )
        return ["", *(f"Note: {note}" for note in notes)] if notes else []

    @staticmethod
    def _problems(problems: list[RowProblem], title: str) -> list[str]:
        if not problems:
            return []
        lines = ["", title, *(problem.line() for problem in problems[:LISTED_ROWS])]
        if len(problems) > LISTED_ROWS:
            lines.append(f"  ... and {len(problems) - LISTED_ROWS} more (-o json lists them all)")
        return lines
