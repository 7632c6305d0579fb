"""
Does task state cost the same with 10^7 rows as with 10^5? The same database grows from one size to
the next, and at each size the same things are measured.

A real deployment (``airflow api-server``, scheduler and dag processor, as in bench_api.py) runs on
PostgreSQL or MariaDB, with a bench DAG's task kept running so that the state API can be called for
it. The tables are filled with bulk SQL (INSERT ... SELECT over a ten-row table of digits, in
chunks), not through the backend: each size has size/1,000 dag runs of 10 tasks x 10 map indexes x
10 keys, and size/100 assets of 10 keys each. After each fill come ANALYZE (VACUUM ANALYZE on
PostgreSQL: the state an autovacuumed table is in), then, at that size:

- get and set of a random key of a random task instance, through MetastoreStateBackend in this
  process (p50/p99), and the same for random assets; with the pages the gets had to read into the
  database's cache, per get (where a get that grows with the table goes);
- get in a task instance that holds 10,000 keys, keys() of it, and get_many of 100 of its keys;
- DELETE of one dag run holding 1,000 state rows (the foreign key cascades to them);
- `airflow db clean --tables dag_run` removing 1,000 old dag runs with 10 state rows each (the
  whole command, as an operator runs it; also the same command when there is nothing to remove);
- get and set through the state API over HTTP, for the running task (p50/p99).

Then a table per database with the growth from the smallest size to the largest, and the query
plans of get, set, keys and get_many at the largest size. PostgreSQL runs as the test deployments
run it (fsync off): the same at every size, which is what the ratios compare.

    PYTHONPATH=dev uv run --no-sync python bench/bench_scale.py [--db postgres mysql] \
        [--sizes 100000 1000000 10000000] [--quick] [--ops 2000] [--api-ops 500] \
        [--mariadb-buffer-pool-mb 1024]

The header names the memory each database caches pages in (PostgreSQL's shared_buffers, left at
its default; MariaDB's InnoDB buffer pool, 1 GiB unless told otherwise), read back from the server:
a table that outgrows it costs a read from the OS cache per page, which the ratios would show.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TASKS, MAP_INDEXES, KEYS = 10, 10, 10
ROWS_PER_RUN = TASKS * MAP_INDEXES * KEYS
# Few dags with many runs each: 1,000 runs per dag at 10^7 rows.
DAG_IDS = 10
ASSET_KEYS = 10
# An asset per 100 task state rows: 10^5 assets at 10^7 rows.
ROWS_PER_ASSET = 100
BIG_TASK_KEYS = 10_000
CASCADE_ROWS = 1_000
CLEAN_RUNS, CLEAN_ROWS_PER_RUN = 1_000, 10
# Dag runs per INSERT ... SELECT: a million state rows per statement.
RUNS_PER_CHUNK = 1_000
GOAL = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", nargs="+", choices=("postgres", "mysql"), default=["postgres", "mysql"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[10**5, 10**6, 10**7])
    parser.add_argument("--quick", action="store_true", help="sizes 10^4 and 10^5, fewer operations")
    parser.add_argument("--ops", type=int, default=2000, help="timed operations per latency measure")
    parser.add_argument("--api-ops", type=int, default=500, help="timed requests per state API measure")
    parser.add_argument(
        "--mariadb-buffer-pool-mb",
        type=int,
        default=1024,
        help="InnoDB buffer pool for the MariaDB run, set with SET GLOBAL before the fill (MariaDB's "
        "default, 128 MB, holds task_state at 10^5 rows but not at 10^6: the ratio would measure the "
        "pool, not the statements); 0 keeps the server's setting",
    )
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.ops, args.api_ops = [10**4, 10**5], 300, 100
    for size in args.sizes:
        if size % ROWS_PER_RUN or size < 10 * ROWS_PER_RUN:
            parser.error(
                f"--sizes: {size} is not a multiple of {ROWS_PER_RUN} of at least {10 * ROWS_PER_RUN}"
            )
    args.sizes = sorted(set(args.sizes))
    if len(args.db) > 1:
        # One process per database: Airflow reads its database URL once, at import.
        for db in args.db:
            command = [sys.executable, __file__, "--db", db, "--sizes", *map(str, args.sizes)]
            command += ["--ops", str(args.ops), "--api-ops", str(args.api_ops)]
            command += ["--mariadb-buffer-pool-mb", str(args.mariadb_buffer_pool_mb)]
            subprocess.run(command, check=True)
        return
    run_database(args.db[0], args)


def run_database(db: str, args) -> None:
    # The bench task that stays running while this process speaks for it: bench_api.py's.
    from bench_api import HOLDER_DAG, wait_until_running
    from state_testing.deployment import airflow_deployment

    dags = Path(tempfile.mkdtemp(prefix="state-bench-dags-"))
    (dags / "bench_holder.py").write_text(HOLDER_DAG)
    with airflow_deployment(dags, database=db) as deployment:
        deployment.wait_for_dag("bench_holder", timeout=120)
        deployment.trigger("bench_holder", "bench")
        ti = wait_until_running(deployment)
        for name in ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
            os.environ[name] = deployment.env[name]
        os.environ["AIRFLOW__STATE__API_URL"] = f"{deployment.api_url}/state"
        # Imports Airflow: only now that its environment is this deployment's.
        from state_testing.credentials import credential_for

        try:
            Scale(db, args, deployment, ti, credential_for(deployment.env, ti)).run()
        finally:
            (dags / "release").write_text("")


# --- timing ----------------------------------------------------------------------------------


def latencies(operation: Callable[[int], object], ops: int, warmup: int = 100) -> list[float]:
    """Milliseconds of each of *ops* calls of *operation*, after *warmup* untimed calls."""
    for i in range(warmup):
        operation(i)
    samples = []
    for i in range(ops):
        start = time.perf_counter()
        operation(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def p50_p99(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


# --- the database ----------------------------------------------------------------------------


class Scale:
    def __init__(self, db: str, args, deployment, ti: dict, credential: str) -> None:
        from airflow import settings
        from airflow_task_state.metastore import MetastoreStateBackend

        self.db, self.args, self.deployment, self.ti, self.credential = db, args, deployment, ti, credential
        self.engine = settings.engine
        # A reserved word on MariaDB.
        self.key = "`key`" if db == "mysql" else "key"
        self.backend = MetastoreStateBackend()
        self.runs = 0  # scale dag runs filled so far
        self.assets = 0
        self.asset_ids: list[int] = []
        self.results: dict[int, dict[str, float]] = {}
        self.rng = random.Random(14)

    def concat(self, *parts: str) -> str:
        return f"CONCAT({', '.join(parts)})"

    def sql(self, statement: str, **params: Any) -> Any:
        from sqlalchemy import text

        with self.engine.begin() as conn:
            return conn.execute(text(statement), params)

    def scalar(self, statement: str, **params: Any) -> Any:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return conn.execute(text(statement), params).scalar()

    # -- filling ------------------------------------------------------------------------------

    def prepare(self) -> None:
        self.sql("CREATE TABLE bench_scale_digits (d INTEGER NOT NULL PRIMARY KEY)")
        self.sql("INSERT INTO bench_scale_digits (d) VALUES " + ", ".join(f"({d})" for d in range(10)))
        # The task instance with 10,000 keys, in a dag run of its own.
        big, _ = self.add_runs("bench_scale_big", "big", 1, datetime.now(UTC))
        key = self.concat("'key_'", "a.d", "b.d", "c.d", "e.d")
        self.sql(
            f"INSERT INTO task_state (dag_run_id, task_id, map_index, {self.key}, dag_id, run_id, value, "
            "updated_at, version) "
            f"SELECT r.id, 'big', -1, {key}, r.dag_id, "
            "r.run_id, '{\"offset\": 1}', CURRENT_TIMESTAMP, 1 FROM dag_run r, bench_scale_digits a, "
            "bench_scale_digits b, bench_scale_digits c, bench_scale_digits e WHERE r.id = :id",
            id=big,
        )

    def add_runs(
        self,
        dag_id_prefix: str,
        run_prefix: str,
        count: int,
        start: datetime,
        first: int = 0,
        run_type: str = "scheduled",
    ) -> tuple[int, int]:
        """
        Insert *count* successful dag runs numbered from *first*; return the lowest and highest id
        among them (an auto-increment may leave gaps: ids are never assumed consecutive).
        """
        from airflow.utils.sqlalchemy import UtcDateTime
        from sqlalchemy import bindparam, text

        number = "(a.d * 1000 + b.d * 100 + c.d * 10 + e.d + :base)"
        # Dag ids spread over DAG_IDS dags; run ids unique within each.
        dag_id = (
            self.concat(":dag_prefix", f"MOD({number}, {DAG_IDS})")
            if dag_id_prefix.endswith("_")
            else ":dag_prefix"
        )
        before = self.scalar("SELECT COALESCE(MAX(id), 0) FROM dag_run")
        done = 0
        while done < count:
            batch = min(10_000, count - done)
            statement = text(
                "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, start_date, end_date, "
                "clear_number, span_status) "
                f"SELECT {dag_id}, {self.concat(':run_prefix', number)}, :run_type, 'success', :start, "
                ":start, :start, 0, 'ended' FROM bench_scale_digits a, bench_scale_digits b, "
                f"bench_scale_digits c, bench_scale_digits e WHERE {number} < :stop"
            ).bindparams(bindparam("start", type_=UtcDateTime()))
            with self.engine.begin() as conn:
                conn.execute(
                    statement,
                    {
                        "dag_prefix": dag_id_prefix,
                        "run_prefix": f"{run_prefix}__",
                        "run_type": run_type,
                        "start": start,
                        "base": first + done,
                        "stop": first + done + batch,
                    },
                )
            done += batch
        with self.engine.connect() as conn:
            from sqlalchemy import text as sql_text

            low, high = conn.execute(
                sql_text("SELECT MIN(id), MAX(id) FROM dag_run WHERE id > :before"), {"before": before}
            ).one()
        return low, high

    def fill_runs(self, first_id: int, last_id: int, tasks: int, maps: int, keys: int) -> None:
        """tasks x maps x keys state rows in each dag run with an id in [first_id, last_id]."""
        task = self.concat("'task_'", "t.d")
        key = self.concat("'key_'", "k.d") if keys <= 10 else self.concat("'key_'", "k.d", "j.d")
        key_tables = "bench_scale_digits k" + ("" if keys <= 10 else ", bench_scale_digits j")
        value = self.concat("'{\"offset\": '", "r.id", '\', "city": "Zürich"}\'')
        for lo in range(first_id, last_id + 1, RUNS_PER_CHUNK):
            hi = min(last_id, lo + RUNS_PER_CHUNK - 1)
            self.sql(
                f"INSERT INTO task_state (dag_run_id, task_id, map_index, {self.key}, dag_id, run_id, value, "
                "updated_at, version, updated_by_try) "
                f"SELECT r.id, {task}, m.d, {key}, r.dag_id, r.run_id, {value}, CURRENT_TIMESTAMP, 1, 1 "
                f"FROM dag_run r, bench_scale_digits t, bench_scale_digits m, {key_tables} "
                f"WHERE r.id BETWEEN :lo AND :hi AND t.d < {tasks} AND m.d < {maps}"
                + ("" if keys <= 10 else f" AND k.d * 10 + j.d < {keys}")
                + ("" if keys > 10 else f" AND k.d < {keys}"),
                lo=lo,
                hi=hi,
            )

    def grow(self, size: int) -> float:
        """Add dag runs, state rows and assets up to *size* task state rows; ANALYZE; seconds taken."""
        start = time.perf_counter()
        runs = size // ROWS_PER_RUN
        low, high = self.add_runs("scale_dag_", "scheduled", runs - self.runs, datetime.now(UTC), self.runs)
        self.fill_runs(low, high, TASKS, MAP_INDEXES, KEYS)
        self.runs = runs
        assets = size // ROWS_PER_ASSET
        self.add_assets(assets)
        self.analyze()
        return time.perf_counter() - start

    def add_assets(self, assets: int) -> None:
        number = "(a.d * 100000 + b.d * 10000 + c.d * 1000 + e.d * 100 + f.d * 10 + g.d + :base)"
        digits = ", ".join(f"bench_scale_digits {t}" for t in "abcefg")
        before = self.scalar("SELECT COALESCE(MAX(id), 0) FROM asset")
        group = "`group`" if self.db == "mysql" else '"group"'
        name, uri = self.concat("'scale_'", number), self.concat("'s3://scale/'", number)
        self.sql(
            f"INSERT INTO asset (name, uri, {group}, extra, created_at, updated_at) "
            f"SELECT {name}, {uri}, 'asset', '{{}}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP "
            f"FROM {digits} WHERE {number} < :stop",
            base=self.assets,
            stop=assets,
        )
        low = self.scalar("SELECT MIN(id) FROM asset WHERE id > :before", before=before)
        high = self.scalar("SELECT MAX(id) FROM asset")
        value = self.concat("'{\"watermark\": '", "s.id", "'}'")
        key = self.concat("'watermark_'", "k.d")
        for lo in range(low, high + 1, 100_000):
            self.sql(
                f"INSERT INTO asset_state (asset_id, {self.key}, value, updated_at, version, updated_by) "
                f"SELECT s.id, {key}, {value}, CURRENT_TIMESTAMP, 1, 'api' "
                "FROM asset s, bench_scale_digits k WHERE s.id BETWEEN :lo AND :hi",
                lo=lo,
                hi=min(lo + 100_000 - 1, high),
            )
        self.assets = assets
        with self.engine.connect() as conn:
            from sqlalchemy import text as sql_text

            self.asset_ids = list(
                conn.execute(sql_text("SELECT id FROM asset WHERE name LIKE 'scale%'")).scalars()
            )
        if len(self.asset_ids) != assets:
            raise SystemExit(f"{len(self.asset_ids)} scale assets, expected {assets}")

    def analyze(self) -> None:
        tables = ("task_state", "asset_state", "dag_run", "asset")
        if self.db == "postgres":
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                for table in tables:
                    conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
        else:
            for table in tables:
                self.sql(f"ANALYZE TABLE {table}")

    def task_state_megabytes(self) -> float:
        """task_state's size on disk, table and indexes, to compare with the page cache."""
        if self.db == "postgres":
            size = self.scalar("SELECT pg_total_relation_size('task_state')")
        else:
            size = self.scalar(
                "SELECT data_length + index_length FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = 'task_state'"
            )
        return int(size) / (1024 * 1024)

    def task_state_parts(self) -> str:
        """The MB of task_state's table and of each of its indexes: which part outgrows the cache."""
        from sqlalchemy import text

        if self.db == "postgres":
            query = (
                "SELECT 'table', pg_relation_size('task_state') UNION ALL "
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                "WHERE indrelid = 'task_state'::regclass"
            )
        else:
            # InnoDB's clustered PRIMARY index is the table; sizes from the persistent statistics
            # that ANALYZE TABLE has just refreshed.
            query = (
                "SELECT index_name, stat_value * @@innodb_page_size FROM mysql.innodb_index_stats "
                "WHERE database_name = DATABASE() AND table_name = 'task_state' AND stat_name = 'size'"
            )
        with self.engine.connect() as conn:
            parts = conn.execute(text(query)).all()
        return ", ".join(f"{name} {int(size) / (1024 * 1024):.0f}" for name, size in parts)

    def cache_misses(self) -> int:
        """
        Pages read into the database's page cache so far: blocks read into shared_buffers
        (PostgreSQL), reads the InnoDB buffer pool could not serve (MariaDB).
        """
        if self.db == "postgres":
            # Backends publish their counters about once a second: approximate over a loop of gets.
            read = "SELECT blks_read FROM pg_stat_database WHERE datname = current_database()"
            return int(self.scalar(read))
        with self.engine.connect() as conn:
            return int(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'").one()[1])

    def counts(self) -> tuple[int, int]:
        return self.scalar("SELECT COUNT(*) FROM task_state"), self.scalar("SELECT COUNT(*) FROM asset_state")

    # -- measuring ----------------------------------------------------------------------------

    def random_scope(self):
        from airflow_shared.state import TaskScope

        n = self.rng.randrange(self.runs)
        return TaskScope(
            f"scale_dag_{n % DAG_IDS}",
            f"scheduled__{n}",
            f"task_{self.rng.randrange(TASKS)}",
            self.rng.randrange(MAP_INDEXES),
        )

    def random_asset(self):
        from airflow_shared.state import AssetScope

        return AssetScope(self.rng.choice(self.asset_ids))

    def measure(self, size: int) -> dict[str, float]:
        from airflow_shared.state import TaskScope

        ops, out = self.args.ops, {}
        backend = self.backend

        def record(name: str, samples: list[float]) -> None:
            out[f"{name} p50"], out[f"{name} p99"] = p50_p99(samples)

        # Random scopes and keys drawn before the clock starts; each call hits another row.
        draws = [(self.random_scope(), f"key_{self.rng.randrange(KEYS)}") for _ in range(ops + 100)]
        misses = self.cache_misses()
        record("get", latencies(lambda i: backend.get(*draws[i]), ops))
        # Pages the gets had to fetch from outside the database's own cache (server-wide counter:
        # the deployment's scheduler adds a little), per get including the warm-up.
        out["get cache misses/op"] = (self.cache_misses() - misses) / (ops + 100)
        record("set", latencies(lambda i: backend.set(*draws[i], f'{{"offset": {i}}}'), ops))
        found = sum(backend.get(*draws[i]) is not None for i in range(50))
        if found != 50:
            raise SystemExit(f"only {found} of 50 random keys were found: the fill is not what it should be")
        assets = [
            (self.random_asset(), f"watermark_{self.rng.randrange(ASSET_KEYS)}") for _ in range(ops + 100)
        ]
        record("asset get", latencies(lambda i: backend.get(*assets[i]), ops))
        record("asset set", latencies(lambda i: backend.set(*assets[i], f'{{"watermark": {i}}}'), ops))

        big = TaskScope("bench_scale_big", "big__0", "big", -1)
        big_keys = [f"key_{self.rng.randrange(BIG_TASK_KEYS):04d}" for _ in range(ops + 100)]
        record("get (10k-key task)", latencies(lambda i: backend.get(big, big_keys[i]), ops))
        listed = backend.keys(big)
        if len(listed) != BIG_TASK_KEYS:
            raise SystemExit(
                f"keys() of the big task instance returned {len(listed)} keys, not {BIG_TASK_KEYS}"
            )
        record("keys() 10k", latencies(lambda i: backend.keys(big), 50, warmup=5))
        batches = [[f"key_{k:04d}" for k in self.rng.sample(range(BIG_TASK_KEYS), 100)] for _ in range(400)]
        if len(backend.get_many(big, batches[0])) != 100:
            raise SystemExit("get_many of 100 existing keys did not return 100 values")
        record("get_many 100", latencies(lambda i: backend.get_many(big, batches[i]), 300, warmup=50))

        out["delete 1 run (s)"] = self.delete_one_run(size)
        out["db clean 1000 runs (s)"], out["db clean nothing (s)"] = self.clean_runs(size)
        out.update(self.measure_api())
        return out

    def delete_one_run(self, size: int) -> float:
        from sqlalchemy import text

        run_id, _ = self.add_runs("bench_scale_cascade", f"cascade_{size}", 1, datetime.now(UTC))
        self.fill_runs(run_id, run_id, TASKS, 1, CASCADE_ROWS // TASKS)
        rows = self.scalar("SELECT COUNT(*) FROM task_state WHERE dag_run_id = :id", id=run_id)
        if rows != CASCADE_ROWS:
            raise SystemExit(f"the dag run to delete holds {rows} state rows, not {CASCADE_ROWS}")
        with self.engine.connect() as conn:
            start = time.perf_counter()
            with conn.begin():
                conn.execute(text("DELETE FROM dag_run WHERE id = :id"), {"id": run_id})
            seconds = time.perf_counter() - start
        left = self.scalar("SELECT COUNT(*) FROM task_state WHERE dag_run_id = :id", id=run_id)
        if left:
            raise SystemExit(f"deleting the dag run left {left} of its state rows")
        return seconds

    def clean_runs(self, size: int) -> tuple[float, float]:
        old = datetime.now(UTC) - timedelta(days=30)
        low, high = self.add_runs("bench_scale_clean", f"clean_{size}", CLEAN_RUNS, old, run_type="manual")
        self.fill_runs(low, high, CLEAN_ROWS_PER_RUN, 1, 1)
        rows = self.scalar("SELECT COUNT(*) FROM task_state WHERE dag_id = 'bench_scale_clean'")
        if rows != CLEAN_RUNS * CLEAN_ROWS_PER_RUN:
            raise SystemExit(
                f"the runs to clean hold {rows} state rows, not {CLEAN_RUNS * CLEAN_ROWS_PER_RUN}"
            )
        before = (datetime.now(UTC) - timedelta(days=1)).isoformat()
        command = (
            "db",
            "clean",
            "--clean-before-timestamp",
            before,
            "--tables",
            "dag_run",
            "-y",
            "--skip-archive",
        )
        start = time.perf_counter()
        self.deployment.airflow(*command, timeout=3600)
        seconds = time.perf_counter() - start
        runs = self.scalar("SELECT COUNT(*) FROM dag_run WHERE dag_id = 'bench_scale_clean'")
        rows = self.scalar("SELECT COUNT(*) FROM task_state WHERE dag_id = 'bench_scale_clean'")
        if runs or rows:
            raise SystemExit(f"airflow db clean left {runs} old dag runs and {rows} of their state rows")
        start = time.perf_counter()
        self.deployment.airflow(*command, timeout=3600)
        return seconds, time.perf_counter() - start

    def measure_api(self) -> dict[str, float]:
        from airflow_shared.state import TaskScope
        from airflow_task_state import codec
        from airflow_task_state.protocol import TASK_VALUE_PATH
        from airflow_task_state.worker import client as state_client

        ti = self.ti
        client = state_client.StateClient(SimpleNamespace(**ti))
        # The credential the task's handshake would have left in the cache (bench_api.py).
        state_client._credentials[(os.getpid(), client.ti_id)] = state_client._Credential(
            self.credential, renew_at=float("inf"), expires_at=float("inf")
        )
        path = TASK_VALUE_PATH.format(task_instance_id=client.ti_id)
        scope = TaskScope(ti["dag_id"], ti["run_id"], ti["task_id"], ti["map_index"])
        for k in range(KEYS):
            self.backend.set(scope, f"key_{k}", codec.encode(k))
        keys = [f"key_{self.rng.randrange(KEYS)}" for _ in range(self.args.api_ops + 100)]
        ops = self.args.api_ops

        def api_get(i: int) -> None:
            response = client.request("GET", path, params={"key": keys[i]})
            response.json()

        def api_set(i: int) -> None:
            client.request("PUT", path, params={"key": keys[i]}, content='{"value":' + codec.encode(i) + "}")

        out = {}
        out["api get p50"], out["api get p99"] = p50_p99(latencies(api_get, ops))
        out["api set p50"], out["api set p99"] = p50_p99(latencies(api_set, ops))
        return out

    # -- the plans ----------------------------------------------------------------------------

    def explain(self) -> None:
        from airflow_shared.state import TaskScope
        from airflow_task_state.metastore import statements as sql

        dialect = self.engine.dialect
        now = datetime.now(UTC)
        scope = TaskScope(
            f"scale_dag_{(self.runs // 2) % DAG_IDS}", f"scheduled__{self.runs // 2}", "task_3", 4
        )
        big = TaskScope("bench_scale_big", "big__0", "big", -1)
        many = {f"key_{n}": f"key_{n * 97 % BIG_TASK_KEYS:04d}" for n in range(128)}
        writer = {"value": '{"offset": 7}', "updated_at": now, "updated_by_try": None, "expires_at": None}
        cases = [
            ("get (select_value)", sql.TASK_STATE.select_value, {**sql.params(scope, "key_5"), "now": now}),
            (
                "get_versioned (select_versioned)",
                sql.TASK_STATE.select_versioned,
                {**sql.params(scope, "key_5"), "now": now},
            ),
            ("set (upsert)", sql.TASK_STATE.upsert, {**sql.params(scope, "key_5"), **writer, "now": now}),
            (
                "get in the 10k-key task",
                sql.TASK_STATE.select_value,
                {**sql.params(big, "key_0042"), "now": now},
            ),
            ("keys() of the 10k-key task", sql.TASK_STATE.select_keys, {**sql.params(big), "now": now}),
            (
                "get_many 100 (padded to 128)",
                sql.select_many(big, 100),
                {**sql.params(big), **many, "now": now},
            ),
        ]
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            for title, statement, values in cases:
                compiled = statement.compile(dialect=dialect)
                processors = compiled._bind_processors
                bound = compiled.construct_params(values)
                bound = {k: processors[k](v) if k in processors else v for k, v in bound.items()}
                driver = tuple(bound[n] for n in compiled.positiontup) if compiled.positional else bound
                print(f"\n--- {title} ---\n{compiled}\n")
                if self.db == "postgres":
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + str(compiled), driver)
                    print("\n".join(row[0] for row in cursor.fetchall()))
                else:
                    self.explain_mariadb(cursor, str(compiled), driver)
            raw.rollback()
        finally:
            raw.close()

    def explain_mariadb(self, cursor, statement: str, params: Any) -> None:
        # ANALYZE runs the statement and adds the rows each step really read (r_rows).
        try:
            cursor.execute("ANALYZE " + statement, params)
        except Exception as error:  # shown, then the plan without running it
            print(f"(ANALYZE refused: {error}; EXPLAIN instead)")
            cursor.execute("EXPLAIN " + statement, params)
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
        wanted = [
            n
            for n in (
                "id",
                "select_type",
                "table",
                "type",
                "key",
                "key_len",
                "ref",
                "rows",
                "r_rows",
                "Extra",
            )
            if n in names
        ]
        widths = {n: max(len(n), *(len(str(r[names.index(n)])) for r in rows)) for n in wanted}
        print("  ".join(n.ljust(widths[n]) for n in wanted))
        for row in rows:
            print("  ".join(str(row[names.index(n)]).ljust(widths[n]) for n in wanted))
        if statement.lstrip().upper().startswith("SELECT"):
            self.mariadb_reads(cursor, statement, params)

    def mariadb_reads(self, cursor, statement: str, params: Any) -> None:
        """
        What one run of *statement* read: the handler calls (index descents, next-row steps) and,
        per table, the pages InnoDB touched and those it had to read into the buffer pool
        (ANALYZE FORMAT=JSON's r_engine_stats, MariaDB 10.9+).
        """

        def handler() -> dict[str, int]:
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
            return {name: int(value) for name, value in cursor.fetchall()}

        # The SHOW itself counts a few reads: subtract what one SHOW costs.
        first, second = handler(), handler()
        cursor.execute(statement, params)
        cursor.fetchall()
        third = handler()
        reads = {
            name: (third[name] - second[name]) - (second[name] - first[name])
            for name in third
            if (third[name] - second[name]) - (second[name] - first[name])
        }
        print("handler reads: " + (", ".join(f"{n}={v}" for n, v in reads.items()) or "none"))
        cursor.execute("ANALYZE FORMAT=JSON " + statement, params)
        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "table_name" in node and "r_engine_stats" in node:
                    found.append(f"{node['table_name']}: {json.dumps(node['r_engine_stats'])}")
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(json.loads(cursor.fetchone()[0]))
        print("engine stats (second run): " + ("; ".join(found) or "none reported"))

    # -- the server's cache ---------------------------------------------------------------------

    def resize_buffer_pool(self, megabytes: int) -> None:
        """
        Set MariaDB's InnoDB buffer pool (dynamic since 10.2) and wait until the server has resized
        it: the resize runs in the background, and a fill started before it ends would measure it.
        """
        wanted = megabytes * 1024 * 1024
        self.sql(f"SET GLOBAL innodb_buffer_pool_size = {wanted}")
        deadline = time.monotonic() + 120
        while True:
            size = self.scalar("SELECT @@GLOBAL.innodb_buffer_pool_size")
            with self.engine.connect() as conn:
                status = dict(
                    conn.exec_driver_sql(
                        "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_buffer_pool_resize_status', "
                        "'Innodb_buffer_pool_pages_total')"
                    ).all()
                )
                page = conn.exec_driver_sql("SELECT @@GLOBAL.innodb_page_size").scalar()
            message = str(status.get("Innodb_buffer_pool_resize_status", ""))
            # The pages the pool really has (a few percent go to its own bookkeeping).
            resized = int(status["Innodb_buffer_pool_pages_total"]) * int(page) >= 0.95 * wanted
            if size >= wanted and resized and ("ompleted" in message or not message):
                return
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"innodb_buffer_pool_size is {size} bytes, not {wanted}, 120 s after SET GLOBAL "
                    f"(resize status: {message!r}); run with a smaller --mariadb-buffer-pool-mb or 0"
                )
            time.sleep(0.5)

    def buffer_settings(self) -> str:
        """The page cache and durability settings the numbers depend on, as the server reports them."""
        if self.db == "postgres":
            names = ("shared_buffers", "effective_cache_size", "work_mem", "fsync", "synchronous_commit")
            with self.engine.connect() as conn:
                return ", ".join(f"{n}={conn.exec_driver_sql(f'SHOW {n}').scalar()}" for n in names)
        with self.engine.connect() as conn:
            variables = dict(
                conn.exec_driver_sql(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_buffer_pool_size', "
                    "'innodb_buffer_pool_chunk_size', 'innodb_flush_log_at_trx_commit', "
                    "'innodb_log_file_size', 'innodb_page_size', 'innodb_flush_method')"
                ).all()
            )
            pages = conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_total'").one()[1]
        mib = 1024 * 1024
        chunk = int(variables["innodb_buffer_pool_chunk_size"])
        # 0: MariaDB sizes the chunks itself (10.8+).
        chunk_text = f"{chunk // mib}MB" if chunk else "auto"
        return (
            f"innodb_buffer_pool_size={int(variables['innodb_buffer_pool_size']) // mib}MB "
            f"(pages_total={pages} x {variables['innodb_page_size']} B = "
            f"{int(pages) * int(variables['innodb_page_size']) // mib}MB), "
            f"innodb_buffer_pool_chunk_size={chunk_text}, "
            f"innodb_log_file_size={int(variables['innodb_log_file_size']) // mib}MB, "
            f"innodb_flush_log_at_trx_commit={variables['innodb_flush_log_at_trx_commit']}, "
            # O_DIRECT: a page the pool lacks comes from the disk, not from the OS page cache.
            f"innodb_flush_method={variables['innodb_flush_method']}"
        )

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        with self.engine.connect() as conn:
            version = conn.exec_driver_sql("SELECT VERSION()").scalar()
        print(f"\n=== bench_scale on {self.db}: {version} ===", flush=True)
        if self.db == "mysql" and self.args.mariadb_buffer_pool_mb:
            self.resize_buffer_pool(self.args.mariadb_buffer_pool_mb)
        print(f"buffers: {self.buffer_settings()}", flush=True)
        self.prepare()
        for size in self.args.sizes:
            fill = self.grow(size)
            rows, asset_rows = self.counts()
            print(
                f"\nfilled to {size} scale rows: task_state {rows}, asset_state {asset_rows}, "
                f"in {fill:.1f} s (with ANALYZE); task_state with its indexes "
                f"{self.task_state_megabytes():.0f} MB ({self.task_state_parts()})",
                flush=True,
            )
            result = self.measure(size)
            result["fill (s)"] = fill
            self.results[size] = result
            for name, value in result.items():
                print(f"  {name:<26}{value:>10.3f}", flush=True)
        self.report()
        print(f"\nQuery plans at {max(self.args.sizes)} rows:", flush=True)
        self.explain()

    def report(self) -> None:
        sizes = self.args.sizes
        first, last = sizes[0], sizes[-1]
        names = list(self.results[first])
        print(
            f"\nScale on {self.db}: ms unless (s); ratio = {last:.0e} / {first:.0e} "
            f"(goal for p50 get/set: < {GOAL}x)\nbuffers: {self.buffer_settings()}"
        )
        header = f"{'measure':<26}" + "".join(f"{size:>12.0e}" for size in sizes) + f"{'ratio':>8}"
        print(header)
        for name in names:
            values = [self.results[size][name] for size in sizes]
            ratio = values[-1] / values[0] if values[0] else float("nan")
            flag = ""
            if name in ("get p50", "set p50", "asset get p50", "asset set p50", "api get p50", "api set p50"):
                flag = "  ok" if ratio < GOAL else "  NOT FLAT"
            print(f"{name:<26}" + "".join(f"{v:>12.3f}" for v in values) + f"{ratio:>8.2f}{flag}")
        print("\nJSON: " + json.dumps({"db": self.db, "results": self.results}), flush=True)


if __name__ == "__main__":
    main()
