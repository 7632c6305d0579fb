"""
Times in the metastore where MySQL stores them differently: ``TIMESTAMP`` columns end in 2038, and
read and write in the session's time zone. On both MySQL write paths; the far expiry also on the
other databases, which store it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from airflow_shared.state import StateCapabilityError
from test_metastore import scope  # noqa: F401  (the fixture)


@pytest.fixture(params=["returning", "last_insert_id"])
def backend(request, db_kind):
    from airflow_task_state.metastore import MetastoreStateBackend

    if request.param == "last_insert_id" and db_kind != "mysql":
        pytest.skip("the last_insert_id path runs on MySQL/MariaDB only")
    return MetastoreStateBackend(write_path=request.param)


@pytest.mark.parametrize("years", [12, 99])
def test_an_expiry_after_2038_is_stored_or_refused_on_mysql_saying_why(backend, scope, db_kind, years):  # noqa: F811
    """
    The API accepts a ttl of up to 100 years; MySQL's TIMESTAMP ends on 2038-01-19. There every
    write that would expire later is refused before it reaches the database, saying why, and
    nothing is written; elsewhere it is stored.
    """
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(days=365 * years)
    writes = {
        "write": lambda: backend.write(scope, "far", "v", expires_at=when),
        "increment": lambda: backend.increment(scope, "counter", 1, expires_at=when),
        "set_many": lambda: backend.set_many(scope, {"many": "1"}, expires_at=when),
        "awrite": lambda: asyncio.run(backend.awrite(scope, "far", "v", expires_at=when)),
    }
    if db_kind != "mysql":
        for write in writes.values():
            write()
        assert backend.get_entry(scope, "far").expires_at == when
        assert backend.get_many(scope, ["far", "counter", "many"]) == {
            "far": "v",
            "counter": "1",
            "many": "1",
        }
        return
    for name, write in writes.items():
        with pytest.raises(
            StateCapabilityError, match=r"does not support an expiry after 2038-01-19 03:14:07 UTC"
        ) as refused:
            write()
        assert "give a ttl that ends before, or none; nothing was written" in str(refused.value), name
    assert backend.get_many(scope, ["far", "counter", "many"]) == {}
    # Up to the end of the column it is stored.
    last = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)
    backend.write(scope, "far", "v", expires_at=last)
    assert backend.get_entry(scope, "far").expires_at == last


# Airflow sets ``time_zone = '+00:00'`` on each connection of its sync engines (and the autocommit
# engine copies that), but not on the async engine's: there TIMESTAMP values (expires_at,
# updated_at) are read and written in the server's own time zone. On a MySQL/MariaDB server whose
# time zone is not UTC, the async methods (aget, awrite, aset_many, ...) see expiries shifted by the
# offset: a key the sync methods see live is expired for aget, and one awrite gives an hour's ttl is
# expired at once for get.
@pytest.fixture
def server_time_zone_behind_utc(db_kind):
    if db_kind != "mysql":
        pytest.skip("MySQL/MariaDB TIMESTAMPs follow the session's time zone")
    from airflow import settings
    from sqlalchemy import text

    with settings.engine.connect() as connection:
        before = connection.execute(text("SELECT @@GLOBAL.time_zone")).scalar_one()
        connection.execute(text("SET GLOBAL time_zone = '-05:00'"))
    # New connections take the server's time zone: drop the pooled ones.
    settings.engine.dispose()
    if settings.async_engine is not None:
        settings.async_engine.sync_engine.dispose()
    from airflow_task_state.airflow_db.engine import autocommit_engine

    autocommit_engine().dispose()
    yield
    with settings.engine.connect() as connection:
        connection.execute(text("SET GLOBAL time_zone = :before"), {"before": before})
    settings.engine.dispose()
    if settings.async_engine is not None:
        settings.async_engine.sync_engine.dispose()
    autocommit_engine().dispose()


@pytest.mark.usefixtures("server_time_zone_behind_utc")
def test_async_and_sync_calls_agree_on_expiry_whatever_the_servers_time_zone(backend, scope):  # noqa: F811
    in_an_hour = datetime.now(UTC) + timedelta(hours=1)
    backend.write(scope, "sync", "v", expires_at=in_an_hour)
    assert backend.get(scope, "sync") == "v"

    async def written_and_read_async():
        await backend.awrite(scope, "async", "v", expires_at=in_an_hour)
        return await backend.aget(scope, "sync"), await backend.aget(scope, "async")

    assert asyncio.run(written_and_read_async()) == ("v", "v")
    assert backend.get(scope, "async") == "v"
    assert backend.get_entry(scope, "async").expires_at.replace(microsecond=0) == in_an_hour.replace(
        microsecond=0
    )
