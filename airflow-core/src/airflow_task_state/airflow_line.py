"""
What differs between the two Airflow lines this package runs on, decided here and nowhere else.

On Airflow 3.2 state lives in this package's own tables, ``task_state`` and ``asset_state``. Airflow
3.3 has a state store of its own: tables ``task_state_store`` and ``asset_state_store``, which its
task accessors, REST API, UI and ``airflow state-store clean`` use. There the rows are those, so both
APIs see one store, and what they lack (a key's version and writer, an asset key's expiry) is kept
beside them, in this package's tables ``task_state_meta`` and ``asset_state_meta``. Who reads
:data:`AIRFLOW_HAS_STATE_STORE`, and for what (everything else is the same code on both lines):

- :mod:`airflow_task_state.metastore`: the metastore's class and tables for this Airflow
  (:mod:`~airflow_task_state.metastore.beside_airflow33` on 3.3), and the migration chain below;
- :mod:`airflow_task_state.worker.listener`: a task's ``keep_task_state`` is recorded as its try
  starts, since Airflow 3.3's own accessors may touch state before ours;
- :mod:`airflow_task_state.state_store_backend` exists for 3.3's ``[state_store] backend`` only.

Airflow's own APIs that changed between the lines are met here too (:func:`initialize_airflow_stats`).

This module is on the floor: it imports nothing of this package.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from packaging.version import Version

#: Whether this Airflow has its own state store (3.3 and later). Read from the installed distribution,
#: not ``airflow.__version__``: importing ``airflow`` loads its configuration, which discovers the
#: providers, this package among them, and so would import this module while it is half-made.
AIRFLOW_HAS_STATE_STORE = Version(version("apache-airflow-core")).release[:2] >= (3, 3)

#: Where the migration chain's revisions are (folders of ``metastore/migrations``): on 3.3 one more,
#: which moves what 3.2 kept in this package's tables into Airflow's store, beside its meta rows.
MIGRATION_VERSION_FOLDERS = ("versions", "versions_airflow33") if AIRFLOW_HAS_STATE_STORE else ("versions",)
#: airflow-task-state releases and the revision each left the chain at (``--to-version``).
MIGRATION_RELEASES = {"0.1.0": "b7d3e1a90112", "0.2.0": "c4a8f2d60113"}
if AIRFLOW_HAS_STATE_STORE:
    MIGRATION_RELEASES["0.8.0"] = "e5b1c7f30114"


def initialize_airflow_stats() -> None:
    """
    Build Airflow's ``Stats`` from ``[metrics]`` unless something in this process did already. Airflow
    3.3 keeps it in module functions (``initialize(factory=, export_legacy_names=)``, a factory from
    ``get_stats_factory()``), 3.2 on the ``Stats`` class (``Stats.initialize(factory=)``, a factory from
    ``get_stats_factory(Stats)``): told apart by what Airflow's module offers, not by its version.
    """
    from airflow._shared.observability.metrics import stats
    from airflow.configuration import conf
    from airflow.observability.metrics.stats_utils import get_stats_factory

    # The signature differs per line; typed loosely so that one source checks against both.
    factory_for: Callable[..., Callable[[], Any]] = get_stats_factory
    initialize_module: Callable[..., None] | None = getattr(stats, "initialize", None)
    if initialize_module is not None:  # 3.3
        if getattr(stats, "_factory", None) is None:
            legacy_names = conf.getboolean("metrics", "legacy_names_on", fallback=True)
            initialize_module(factory=factory_for(), export_legacy_names=legacy_names)
        return
    stats_class: Any = stats.Stats  # 3.2: its metaclass gives it ``factory`` and ``initialize``
    if stats_class.factory is None:
        stats_class.initialize(factory=factory_for(stats_class))
