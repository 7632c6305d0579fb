"""
A TCP proxy between the state backend and the real database server of the test run, which can lose
the reply to one statement after the server ran it: the failure that only a lost connection between
commit and answer produces.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DroppingProxy:
    """Forwards TCP between the backend and the database; :meth:`arm` makes it lose one reply."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._armed: bytes | None = None
        self._stop_on_drop = False
        self._lock = threading.Lock()
        self.dropped = threading.Event()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, statement_contains: bytes, *, and_stop: bool = False) -> None:
        """
        Lose the reply to the next statement whose bytes contain *statement_contains*; *and_stop*:
        take no more connections from then on (the server is gone, for the client).
        """
        self.dropped.clear()
        with self._lock:
            self._armed, self._stop_on_drop = statement_contains, and_stop

    def close(self) -> None:
        """Take no more connections (those open stay open)."""
        self._stopped = True
        # A close alone would leave the accepting thread blocked in accept(), which takes one more.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        doomed = False  # this connection carried the armed statement: its reply is dropped
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [])
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    with self._lock:
                        if self._armed is not None and self._armed in data:
                            self._armed, doomed = None, True
                    server.sendall(data)
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    if doomed:  # the server ran (and committed) it; the client never hears
                        if self._stop_on_drop:
                            self.close()
                        self.dropped.set()
                        return
                    client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()


@contextmanager
def autocommit_engine_through_a_proxy() -> Iterator[DroppingProxy]:
    """
    Calls without a session (the autocommit engine: every state API call) connect through a
    :class:`DroppingProxy` while the block runs; Airflow's own engine still connects directly.
    """
    from airflow import settings
    from airflow_task_state.airflow_db import engine as _engine
    from sqlalchemy.engine import make_url

    direct = settings.SQL_ALCHEMY_CONN
    assert direct is not None
    url = make_url(direct)
    proxy = DroppingProxy(url.host or "127.0.0.1", url.port or 0)
    settings.SQL_ALCHEMY_CONN = url.set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False
    )
    _engine._cached = None
    try:
        yield proxy
    finally:
        _engine.autocommit_engine().dispose()
        settings.SQL_ALCHEMY_CONN = direct
        _engine._cached = None
        proxy.close()


@contextmanager
def airflow_sessions_through_a_proxy() -> Iterator[DroppingProxy]:
    """
    Sessions made by Airflow's ``create_session`` (what a write of several statements and a staged
    commit run in) connect through a :class:`DroppingProxy` while the block runs, one connection each.
    """
    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.orm import scoped_session, sessionmaker
    from sqlalchemy.pool import NullPool

    url = make_url(settings.SQL_ALCHEMY_CONN)
    proxy = DroppingProxy(url.host or "127.0.0.1", url.port or 0)
    engine = create_engine(url.set(host="127.0.0.1", port=proxy.port), poolclass=NullPool)
    direct = settings.Session
    settings.Session = scoped_session(sessionmaker(bind=engine, expire_on_commit=False))
    try:
        yield proxy
    finally:
        settings.Session.remove()
        settings.Session = direct
        engine.dispose()
        proxy.close()
