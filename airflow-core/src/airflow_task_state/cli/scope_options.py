"""
Which state a command works on: the task instance or the asset its options name, checked against
the database so that a typo is an error rather than an empty scope read or written.
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.utils.session import create_session
from airflow_shared.state import AssetScope, StateScope

from airflow_task_state import manage
from airflow_task_state.cli.errors import configured_backend, refusing

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

TASK_OPTIONS = {"dag_id": "--dag-id", "run_id": "--run-id", "task_id": "--task-id"}
ASSET_OPTIONS = {"asset_name": "--asset-name", "asset_uri": "--asset-uri", "asset_id": "--asset-id"}


@dataclass(frozen=True)
class NamedScope:
    """A scope that exists, and how messages name it."""

    scope: StateScope
    description: str


def task_instance(
    dag_id: str, run_id: str, task_id: str, map_index: int | None, session: Session
) -> NamedScope:
    """The task instance (``map_index=None``: every map index of the task); ``manage.NotFound``."""
    scope = manage.find_task_scope(dag_id, run_id, task_id, map_index, session)
    index = "" if map_index in (None, -1) else f", map_index={map_index}"
    described = f"task instance (dag_id={dag_id!r}, run_id={run_id!r}, task_id={task_id!r}{index})"
    return NamedScope(scope, described if map_index is not None else f"every map index of {described}")


def asset(session: Session, **named: Any) -> NamedScope:
    """The asset with this ``asset_id``, ``name`` and/or ``uri``; ``manage.NotFound``."""
    found = manage.find_asset(session, **named)
    return NamedScope(AssetScope(found.asset_id), f"asset {found.name!r} (uri={found.uri!r})")


def named_scope(args: Namespace, *, all_map_indices: bool = False) -> NamedScope:
    """The scope *args* name, exactly one kind, completely; with *all_map_indices*, every map index."""
    configured_backend()  # a misconfigured [state] backend is reported before anything else
    task_given = [flag for name, flag in TASK_OPTIONS.items() if getattr(args, name) is not None]
    # --map-index defaults to None (not -1) so that giving it beside an asset option is noticed.
    if args.map_index is not None:
        task_given.append("--map-index")
    asset_given = [flag for name, flag in ASSET_OPTIONS.items() if getattr(args, name) is not None]
    if task_given and asset_given:
        raise SystemExit(
            f"give either a task instance or an asset, not both ({', '.join(task_given + asset_given)}); "
            "see `airflow state --help`"
        )
    if asset_given and all_map_indices:
        raise SystemExit("--all-map-indices is for task state; an asset has no map indices")
    if not asset_given and not task_given:
        raise SystemExit(
            "name the state: --dag-id, --run-id and --task-id (and --map-index for a mapped task) "
            "for a task instance's, or --asset-name, --asset-uri or --asset-id for an asset's"
        )
    missing = [flag for name, flag in TASK_OPTIONS.items() if getattr(args, name) is None]
    if task_given and missing:
        raise SystemExit(f"task state needs --dag-id, --run-id and --task-id; missing {', '.join(missing)}")
    if all_map_indices and args.map_index is not None:
        raise SystemExit("--all-map-indices clears every map index of the task; leave out --map-index")
    with create_session() as session:
        if asset_given:
            return asset(session, asset_id=args.asset_id, name=args.asset_name, uri=args.asset_uri)
        map_index = None if all_map_indices else -1 if args.map_index is None else args.map_index
        with refusing():  # what TaskScope refuses, such as an empty --task-id
            return task_instance(args.dag_id, args.run_id, args.task_id, map_index, session)
