"""
The test run's set-up, loaded by ``-p state_testing.plugin`` (``addopts`` in the root pyproject.toml).

``pytest --db sqlite|postgres|mysql`` (default ``$STATE_TEST_DB``, else sqlite) picks the metadata
database. PostgreSQL and MariaDB servers are started for the run and removed after it. The
environment is set in ``pytest_configure``, before any test module imports Airflow, because Airflow
reads its configuration at import.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest

from . import dbservers
from .airflow_cli import run_airflow
from .state_cli import airflow_parser, answer, cli, refused  # noqa: F401  (fixtures for every test)

_servers = ExitStack()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=("sqlite", "postgres", "mysql"),
        default=os.environ.get("STATE_TEST_DB", "sqlite"),
        help="metadata database the tests run on (default: sqlite, or $STATE_TEST_DB)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "any_database: what the test proves does not depend on the metadata database (the CLI's own "
        "configuration, Redis, task-side behaviour already proven per database elsewhere): it runs in "
        "the SQLite pass only, so the PostgreSQL and MariaDB passes spend their time on what differs",
    )
    for line, reason in _LINE_MARKERS.items():
        config.addinivalue_line("markers", f"{line}: {reason}")
    home = Path(tempfile.mkdtemp(prefix="state-test-home-"))
    url = _servers.enter_context(dbservers.database(config.getoption("--db"), home))
    os.environ.update(
        {
            "STATE_TEST_HOME": str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            # Tests run many short event loops (asyncio.run); pooled async connections would
            # outlive the loop that opened them.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        }
    )


# What a test proves of one Airflow line only (the other line's layout is tested by its own tests):
# the one place a test is told apart by the Airflow line it runs on.
_LINE_MARKERS = {
    "only_airflow32": "proves the layout of Airflow 3.2 (our tables task_state and asset_state, 0113 as "
    "the head of the chain, the airflow.state alias): skipped on Airflow 3.3, whose layout has tests "
    "of its own",
    "only_airflow33": "proves what exists on Airflow 3.3 only (its state store, revision 0114): "
    "skipped on Airflow 3.2",
}


def _skip_the_other_lines_tests(items: list[pytest.Item]) -> None:
    from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE

    other_line = "only_airflow32" if AIRFLOW_HAS_STATE_STORE else "only_airflow33"
    skip = pytest.mark.skip(reason=_LINE_MARKERS[other_line])
    for item in items:
        if item.get_closest_marker(other_line):
            item.add_marker(skip)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _skip_the_other_lines_tests(items)
    if config.getoption("--db") == "sqlite":
        return
    skip = pytest.mark.skip(reason="does not depend on the metadata database: runs with --db sqlite")
    for item in items:
        if item.get_closest_marker("any_database"):
            item.add_marker(skip)


def pytest_unconfigure(config: pytest.Config) -> None:
    _servers.close()


def pytest_report_header(config: pytest.Config) -> str:
    url = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    return f"metadata database: {config.getoption('--db')} ({url})"


@pytest.fixture(scope="session")
def db_kind(pytestconfig: pytest.Config) -> str:
    return pytestconfig.getoption("--db")


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The metadata database, migrated by the real `airflow db migrate` once per run."""
    run_airflow("db", "migrate")
    _async_engine_without_pool()


def _async_engine_without_pool() -> None:
    """
    Tests run many short event loops (asyncio.run), and a pooled async connection only works in
    the loop that opened it. Airflow 3.2.1 builds its async engine with a pool whatever
    [database] sql_alchemy_pool_enabled says, so the tests give it one without.
    """
    from airflow import settings
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
    from sqlalchemy.pool import NullPool

    if settings.async_engine is None or isinstance(settings.async_engine.pool, NullPool):
        return
    settings.async_engine.sync_engine.dispose()
    settings.async_engine = create_async_engine(settings.SQL_ALCHEMY_CONN_ASYNC, poolclass=NullPool)
    settings.AsyncSession = async_sessionmaker(
        bind=settings.async_engine, class_=AsyncSession, autoflush=False, expire_on_commit=False
    )
