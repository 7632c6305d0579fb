"""
The import paths of airflow-task-state 0.7 and earlier (``airflow.state``), kept on Airflow 3.2 by
the finder that ``airflow_task_state.pth`` installs: the same module objects, never second copies
(a second copy of the task client would hold a second credential cache).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.any_database


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """*code* in a new interpreter of this environment, which started as every Airflow process does."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.only_airflow32  # on 3.3 ``airflow.state`` is Airflow's own
def test_the_0_7_import_paths_are_the_same_modules_on_airflow_3_2():
    probe = _run(
        "import airflow_task_state, airflow_task_state.metastore.models as models\n"
        "from airflow.state import task_state, asset_state, NEVER_EXPIRES, StateConflictError\n"
        "from airflow.state.metastore import MetastoreStateBackend\n"
        "from airflow.state.metastore.models import TaskStateModel, AssetStateModel\n"
        "from airflow.state.resumable import ResumableJobMixin\n"
        "import airflow.state, airflow.state.worker.accessors as accessors, sys\n"
        "assert airflow.state is airflow_task_state\n"
        "assert task_state is airflow_task_state.task_state\n"
        "assert TaskStateModel is models.TaskStateModel\n"
        "assert accessors is sys.modules['airflow_task_state.worker.accessors']\n"
        "assert accessors.__spec__.name == 'airflow_task_state.worker.accessors'\n"
        # Each file of the package executed once: every module object of a file is the same object.
        "by_file = {}\n"
        "for module in list(sys.modules.values()):\n"
        "    by_file.setdefault(getattr(module, '__file__', None), set()).add(id(module))\n"
        "by_file = {f: ids for f, ids in by_file.items() if f and '/airflow_task_state/' in f}\n"
        "assert all(len(ids) == 1 for ids in by_file.values())\n"
        "assert all(sys.modules[n] is sys.modules['airflow_task_state' + n[len('airflow.state'):]]\n"
        "           for n in list(sys.modules) if n.startswith('airflow.state'))\n"
    )
    assert probe.returncode == 0, probe.stderr


def test_the_finder_answers_for_nothing_where_airflow_has_its_own_airflow_state(tmp_path):
    """Airflow 3.3 ships airflow/state/: the finder must leave it alone (simulated by a package of
    that name put first on the path; the real 3.3 is tested in the Airflow 3.3 suite)."""
    (tmp_path / "airflow" / "state").mkdir(parents=True)
    (tmp_path / "airflow" / "state" / "__init__.py").write_text("AIRFLOWS_OWN = True\n")
    probe = _run(
        "import sys, airflow\n"
        f"airflow.__path__.insert(0, {str(tmp_path / 'airflow')!r})\n"
        "import airflow.state\n"
        "assert airflow.state.AIRFLOWS_OWN, airflow.state\n"
        "try:\n"
        "    import airflow.state.worker\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('the finder answered below Airflow\\'s own airflow.state')\n"
    )
    assert probe.returncode == 0, probe.stderr
