"""
What the tests and the benchmarks of this repository share; not shipped in any distribution.

* ``state_testing.plugin``: the pytest plugin the root ``pyproject.toml`` loads (``-p``): the
  ``--db`` option, a per-run Airflow home and metadata database, the ``db_kind`` and
  ``airflow_db`` fixtures.
* ``state_testing.dbservers``: throw-away PostgreSQL, MariaDB and Redis servers.
* ``state_testing.deployment``: a real Airflow deployment (api-server, scheduler, dag-processor).
* ``state_testing.airflow_cli``: ``run_airflow``, a real ``airflow`` command in a new process.
* ``state_testing.deployer_venv``: the built wheels installed beside a released Airflow in a new
  virtualenv, as the install docs say.

``dev/`` is on the path through ``pythonpath`` in the root ``pyproject.toml`` for pytest; scripts
run from the repository root with ``python -m`` (``dev/demo``, the benchmarks) find it as well.
"""
