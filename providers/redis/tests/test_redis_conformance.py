"""The shared conformance kit, unchanged, against a real redis-server."""

from __future__ import annotations

import pytest
from airflow_shared.state.testing import StateBackendConformance


class TestRedisConformance(StateBackendConformance):
    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self, make_backend):
        return make_backend()


class TestRedisConformanceWithoutExpiry(StateBackendConformance):
    """The same contract holds with every TTL switched off (a different write path: PERSIST)."""

    records_writes = True
    records_asset_writers = True

    @pytest.fixture
    def backend(self, make_backend):
        return make_backend(task_ttl_seconds=None, asset_ttl_seconds=0)
