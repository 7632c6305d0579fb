"""
Throw-away PostgreSQL, MariaDB and Redis servers on loopback, for the tests and the benchmarks.

Each server lives in a temporary directory, listens on a free port of 127.0.0.1 and is gone when
stopped. PostgreSQL refuses to run as root, so as root its binaries run as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DATABASE = "airflow_state_test"
USER = "airflow"
PASSWORD = "airflow"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


# The PostgreSQL servers postgres_server() runs in this process, by URL: what pg_ctl needs to
# restart one (its data directory, log file, and the user it runs as).
_postgres_servers: dict[str, tuple[list[str], Path, Path]] = {}


def restart_postgres(url: str, mode: str = "fast") -> None:
    """
    Restart the server behind *url* (a URL postgres_server() yielded) with `pg_ctl restart -m mode -w`.

    Returns once the new server accepts connections. The server keeps its options, data and port;
    every connection to the old one is cut.
    """
    run_as, data, log = _postgres_servers[url]
    command = [*run_as, _pg_bin("pg_ctl"), "restart", "-m", mode, "-w", "-D", str(data), "-l", str(log)]
    subprocess.run(command, check=True, capture_output=True)


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return found


@contextlib.contextmanager
def postgres_server(extra_settings: dict[str, str] | None = None) -> Iterator[str]:
    """Run a PostgreSQL server; yield a psycopg2 SQLAlchemy URL for an empty database."""
    from pytest_postgresql.janitor import DatabaseJanitor

    as_root = os.geteuid() == 0
    run_as = ["runuser", "-u", "postgres", "--"] if as_root else []
    base = Path(tempfile.mkdtemp(prefix="state-pg-"))
    if as_root:
        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
    data, port = base / "data", free_port()
    url = f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DATABASE}"
    settings = {"listen_addresses": "127.0.0.1", "port": str(port), "unix_socket_directories": str(base)}
    settings.update(extra_settings or {})
    options = " ".join(f"-c {k}={v}" for k, v in settings.items())
    try:
        subprocess.run(
            [*run_as, _pg_bin("initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *run_as,
                _pg_bin("pg_ctl"),
                "start",
                "-w",
                "-D",
                str(data),
                "-l",
                str(base / "log"),
                "-o",
                options,
            ],
            check=True,
            capture_output=True,
        )
        _wait_for_port(port)
        janitor = DatabaseJanitor(user=USER, host="127.0.0.1", port=port, dbname=DATABASE, version=15)
        janitor.init()
        _postgres_servers[url] = (run_as, data, base / "log")
        yield url
    finally:
        _postgres_servers.pop(url, None)
        subprocess.run(
            [*run_as, _pg_bin("pg_ctl"), "stop", "-m", "immediate", "-D", str(data)], capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def mariadb_server() -> Iterator[str]:
    """Run a MariaDB server (the MySQL dialect); yield a mysqlclient SQLAlchemy URL for an empty database."""
    from pytest_mysql.executor import MySQLExecutor

    for tool in ("mysqld_safe", "mariadbd", "mariadb-admin", "mariadb-install-db", "mariadb"):
        if not shutil.which(tool):
            raise RuntimeError(f"MariaDB's {tool} is not installed (Debian: apt-get install mariadb-server)")
    base = Path(tempfile.mkdtemp(prefix="state-mariadb-"))
    port = free_port()
    executor = MySQLExecutor(
        mysqld_safe=Path(shutil.which("mysqld_safe")),
        mysqld=Path(shutil.which("mariadbd")),
        admin_exec=shutil.which("mariadb-admin"),
        logfile_path=str(base / "log"),
        params="--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci --skip-name-resolve",
        base_directory=base,
        user="root",
        host="127.0.0.1",
        port=port,
        install_db=shutil.which("mariadb-install-db"),
    )
    try:
        executor.start()
        subprocess.run(
            [
                "mariadb",
                f"--socket={executor.unixsocket}",
                "-uroot",
                "-e",
                f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
                f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';"
                f"GRANT ALL ON *.* TO '{USER}'@'%';",
            ],
            check=True,
            capture_output=True,
        )
        yield f"mysql+mysqldb://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}"
    finally:
        with contextlib.suppress(Exception):
            executor.stop()
        shutil.rmtree(base, ignore_errors=True)


REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Run redis-server on a free port of 127.0.0.1 in a temporary directory; yield its URL."""
    workdir = tempfile.mkdtemp(prefix="state-redis-")
    port = free_port()
    # --save '' and --appendonly no: nothing is persisted; the data dies with the process.
    command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--dir", workdir, "--daemonize", "no", "--loglevel", "warning"]
    log_path = os.path.join(workdir, "redis.log")
    # Output goes to a file, not a pipe nobody drains, which could fill up and stall the server.
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_for_redis(url, server, log_path)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def wait_for_redis(url: str, server: subprocess.Popen[bytes], log_path: str) -> None:
    """Return once the redis-server *server* answers PING at *url* (after replaying its files)."""
    import redis

    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 15
    try:
        while True:
            if server.poll() is not None:
                with open(log_path, errors="replace") as log:
                    output = log.read()
                raise RuntimeError(f"redis-server exited with {server.returncode}: {output}")
            try:
                client.ping()
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        client.close()


def have_redis_server() -> bool:
    return os.path.exists(REDIS_SERVER)


@contextlib.contextmanager
def database(kind: str, tmp_dir: Path) -> Iterator[str]:
    """Yield the SQLAlchemy URL of a fresh database of *kind*: sqlite, postgres or mysql."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_dir / 'airflow.db'}"
    elif kind == "postgres":
        with postgres_server(extra_settings={"fsync": "off"}) as url:
            yield url
    elif kind == "mysql":
        with mariadb_server() as url:
            yield url
    else:
        raise ValueError(f"unknown database {kind!r}: choose sqlite, postgres or mysql")


@contextlib.contextmanager
def scratch_database(kind: str, directory: Path) -> Iterator[str]:
    """
    A new, empty database beside the test run's, removed afterwards; yields its URL.

    For tests that must not touch the run's database (another Airflow version's migrations): a
    SQLite file in *directory*, or a database created on the run's PostgreSQL or MariaDB server
    (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), in utf8mb4 on MariaDB like the run's own.
    """
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'airflow.db'}"
        return
    import uuid

    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    server = sa.engine.make_url(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    name = f"scratch_{uuid.uuid4().hex[:10]}"
    create, drop = f"CREATE DATABASE {name}", f"DROP DATABASE IF EXISTS {name}"
    if kind == "mysql":
        create += " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    else:
        drop += " WITH (FORCE)"  # connections a killed process left behind must not block it
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.exec_driver_sql(create)
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(drop)
        admin.dispose()
