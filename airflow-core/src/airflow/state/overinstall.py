"""
Says so, loudly, when Airflow 3.3 has been installed over this distribution.

pip and uv install ``apache-airflow-core==3.3`` into an environment that holds airflow-task-state
(they only warn that our requirement ``<3.3`` is no longer met). Both distributions own files under
``airflow/state/``: 3.3's ``__init__.py`` replaces ours, and our ``metastore/`` package hides 3.3's
``metastore.py`` module, so 3.3's default state store backend cannot be imported and every task of
3.3 that uses the state store fails, while ``airflow`` commands look healthy. Uninstalling ours then
deletes 3.3's ``__init__.py`` too, since our RECORD lists it.

ProvidersManager calls our ``get_provider_info`` while Airflow's configuration initialises, before
any ``airflow`` command (``airflow version`` included) runs: the check runs there. In a healthy
environment it costs one ``stat``; it reads package metadata only once it has found 3.3's module.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import TextIO

# A module that Airflow 3.3 installs beside our metastore/ package, and Airflow 3.2 does not have.
AIRFLOW33_MODULE = Path(__file__).with_name("metastore.py")

_warned = False


def airflow_installed_over_us() -> str | None:
    """The version of the apache-airflow-core installed over this distribution, or None if none was."""
    if not AIRFLOW33_MODULE.exists():
        return None
    try:
        return metadata.version("apache-airflow-core")
    except metadata.PackageNotFoundError:
        return "3.3"


def installer() -> tuple[str, str]:
    """
    The uninstall and install commands of this very environment: a bare ``pip`` may be another
    Python's (a virtualenv made by uv has no pip of its own), which would leave this one broken.
    """
    python = shlex.quote(sys.executable)
    if importlib.util.find_spec("pip") is not None:
        return f"{python} -m pip uninstall -y", f"{python} -m pip install"
    return f"uv pip uninstall --python {python}", f"uv pip install --python {python}"


def repair_message(airflow_version: str) -> str:
    uninstall, install = installer()
    return (
        f"ERROR: Airflow {airflow_version} (apache-airflow-core) was installed over airflow-task-state,\n"
        "which works with Airflow 3.2 only. Both own files under airflow/state/, so Airflow's own state\n"
        "store cannot be imported and tasks that use it fail. Your state in the database is untouched.\n"
        "Repair this environment (the order matters):\n"
        f"    {uninstall} airflow-task-state\n"
        f'    {install} --force-reinstall --no-deps "apache-airflow-core=={airflow_version}"\n'
        'then move the state into Airflow 3.3 with airflow-state-upgrade: see "Upgrading to Airflow 3.3"\n'
        "in airflow-task-state's documentation.\n"
    )


def warn_if_airflow_installed_over_us(stream: TextIO | None = None) -> None:
    """Print the repair to stderr, once per process, when Airflow 3.3 was installed over us."""
    global _warned
    if _warned:
        return
    version = airflow_installed_over_us()
    if version is None:
        return
    _warned = True
    (stream or sys.stderr).write(repair_message(version))
