from __future__ import annotations

from collections.abc import Iterator

import pytest
from state_testing.dbservers import redis_server


@pytest.fixture(autouse=True)
def _migrated(airflow_db) -> None:
    """Every cross-distribution test runs on a migrated metadata database."""


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url
