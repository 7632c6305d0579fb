"""
``airflow.state``, the import path of airflow-task-state 0.7 and earlier, as an alias of
``airflow_task_state``, on Airflow 3.2 only.

Airflow 3.3 ships a package ``airflow.state`` of its own, so this distribution no longer installs
anything under ``airflow/`` (nothing of Airflow's is overwritten or shadowed). Code written for
0.7 (``from airflow.state import task_state``, ``[state] backend =
airflow.state.metastore.MetastoreStateBackend``, the models) keeps working where Airflow has no
``airflow.state``: this finder, installed at interpreter start by ``airflow_task_state.pth``, then
answers for ``airflow.state`` and every module below it with the very module objects of
``airflow_task_state`` (never a second copy of a module). Where Airflow has one (3.3), it answers
for nothing. Every Python process of the environment runs it, so it imports only what Python has
already loaded at that point (``importlib.abc`` alone would cost more than the rest of it): the finder
and loader are such by their methods, and ``importlib.util`` is loaded when an alias is asked for.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which Python has not loaded yet
if TYPE_CHECKING:
    from typing import Any

LEGACY = "airflow.state"
CURRENT = "airflow_task_state"


class LegacyImports:
    """Answers for ``airflow.state[.*]`` with ``airflow_task_state[.*]``, unless Airflow has its own."""

    def __init__(self) -> None:
        self._own_specs: dict[str, Any] = {}  # alias name -> the module's own spec

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname == LEGACY:
            airflow = sys.modules.get("airflow")
            if airflow is None or PathFinder.find_spec(LEGACY, airflow.__path__) is not None:
                return None  # Airflow 3.3's own package
        elif not fullname.startswith(LEGACY + ".") or LEGACY not in self._own_specs:
            return None  # not ours, or below Airflow's own airflow.state
        import importlib.util

        current = importlib.util.find_spec(CURRENT + fullname[len(LEGACY) :])
        if current is None:
            return None
        is_package = current.submodule_search_locations is not None
        return ModuleSpec(fullname, self, is_package=is_package)  # type: ignore[arg-type]  # a Loader by its methods

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(CURRENT + spec.name[len(LEGACY) :])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Already executed under its own name; the import system gave it the alias's spec.
        alias = module.__spec__.name if module.__spec__ is not None else ""
        module.__spec__ = self._own_specs.get(alias, module.__spec__)


def install() -> None:
    """First on ``sys.meta_path``: below an alias, Python's own finder would load second copies."""
    if not any(isinstance(finder, LegacyImports) for finder in sys.meta_path):
        sys.meta_path.insert(0, LegacyImports())
