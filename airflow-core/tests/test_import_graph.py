"""
The state package's import graph runs one way: each layer imports only the layers below it.

From the bottom: the floor beside ``__init__`` (protocol, errors, settings, expiry, the backend's
selection) and ``airflow_db/`` (Airflow's own metadata database); ``metastore/``, the default
storage, one backend among others; ``manage``, what operators do to state; the surfaces ``api/``
(API server), ``cli/`` and ``worker/`` (task processes), which never import one another; the
package's faces (``__init__``, ``resumable``); and on top the example DAGs, which import what users
import (the faces), and the entry points Airflow loads by name: ``plugin``, the one module that wires
the API server and the task process together, and ``provider_info``, which names the storage and the
CLI it installs. No module of the package imports an entry point.
"""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_task_state
import pytest

# Runs in the SQLite pass only: the import graph is read from the source.
pytestmark = pytest.mark.any_database

PACKAGE = Path(airflow_task_state.__file__).parent

# Each module's layer: the first folder or module under airflow_task_state that names one.
LAYERS = {
    "airflow_db": 0,
    "metastore": 1,
    "manage": 2,
    "api": 3,
    "cli": 3,
    "worker": 3,
    "__init__": 4,
    "resumable": 4,
    "example_dags": 5,
    "plugin": 5,
    "provider_info": 5,
    # Airflow 3.3's [state_store] backend: a face of the package, as the plugin is.
    "state_store_backend": 5,
}
FLOOR = 0  # every other module beside __init__


def _layer(module: str) -> tuple[str, int]:
    part = module.split(".")[1] if module.count(".") >= 1 else "__init__"
    return part, LAYERS.get(part, FLOOR)


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, names the package face) of every import of airflow_task_state in *path*."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("airflow_task_state"):
            if node.module == "airflow_task_state":
                for alias in node.names:
                    face = not (PACKAGE / alias.name).is_dir() and not (PACKAGE / f"{alias.name}.py").exists()
                    found.append((node.lineno, f"airflow_task_state.{alias.name}", face))
            else:
                found.append((node.lineno, node.module, False))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name, False) for a in node.names if a.name.startswith("airflow_task_state.")
            ]
    return found


def _modules() -> list[tuple[str, Path]]:
    return [
        ("airflow_task_state." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts), path)
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_module_imports_a_layer_above_it_or_a_sibling_surface():
    crossings = []
    for module, path in _modules():
        source_part, source_layer = _layer(module)
        for line, target, _ in _imports(path):
            target_part, target_layer = _layer(target)
            if source_part == target_part:
                continue
            if target_layer > source_layer or (target_layer == source_layer and source_layer != FLOOR):
                crossings.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    assert crossings == []


def test_the_api_server_and_task_processes_reach_storage_only_through_the_backend_contract():
    reaching = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for module, path in _modules()
        if _layer(module)[0] in ("api", "worker")
        for line, target, _ in _imports(path)
        if _layer(target)[0] == "metastore"
    ]
    assert reaching == []


def test_modules_of_the_package_import_defining_modules_not_the_package_face():
    faces = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for module, path in _modules()
        if _layer(module)[0] != "example_dags"
        for line, _, face in _imports(path)
        if face
    ]
    assert faces == []


def test_the_checks_see_a_crossing(tmp_path):
    # The walk finds imports at any depth, and the layer table places both sides of a crossing.
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from airflow_task_state.api.app import create_app\n")
    assert _imports(probe) == [(2, "airflow_task_state.api.app", False)]
    assert _layer("airflow_task_state.worker.client")[1] == _layer("airflow_task_state.api.app")[1] == 3
    assert (
        _layer("airflow_task_state.airflow_db.engine")[1] < _layer("airflow_task_state.metastore.backend")[1]
    )
