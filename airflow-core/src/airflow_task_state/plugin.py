"""
Where the state package is wired together (entry point ``airflow.plugins``): the state API mounted
on the API server, the task process's listener, and, under ``dag.test()``, the state API served
inside the task's own process. Only this module imports both ``api/`` and ``worker/``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import urlsplit

import httpx
from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_task_state import config
from airflow_task_state.protocol import URL_PREFIX
from airflow_task_state.worker import client
from airflow_task_state.worker import listener as try_listener

log = logging.getLogger(__name__)

#: The name of both React apps: the task instance tab's label and the navigation entry's. Airflow
#: 3.2's UI finds an app's component at ``globalThis[name]``, so ``state.js`` registers this name.
UI_APP_NAME = "State"


def state_react_apps() -> list[dict[str, Any]]:
    """The State tab of the task instance page and the State page of the Browse menu."""
    # Airflow 3.2.1's UI resolves a relative bundle_url against its own script's URL
    # (/static/assets/), not against the page: root-absolute, under [api] base_url's path.
    ui = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/") + URL_PREFIX + "/ui"
    common = {
        "name": UI_APP_NAME,
        "bundle_url": f"{ui}/state.js",
        "icon": f"{ui}/state.svg",
        "icon_dark_mode": f"{ui}/state-dark.svg",
    }
    # url_route must be unique among all plugins' views and apps (Airflow drops clashing ones).
    return [
        {**common, "destination": "task_instance", "url_route": "task-state"},
        {**common, "destination": "nav", "category": "browse", "url_route": "state"},
    ]


class LazyStateApp:
    """
    An ASGI app that builds the state API as the API server starts (:class:`StateApiAtStart`),
    or else on its first request. Airflow loads plugins in every process, task processes included;
    only API servers serve this app, so only they import the API's modules (FastAPI, the ORM, the
    routes and their schemas).
    """

    def __init__(self) -> None:
        self._app: Any = None
        self._building = threading.Lock()
        self._serving = False

    def build(self) -> Any:
        """The state API, built now unless it is (by the first request, or as the API server starts)."""
        with self._building:
            if self._app is None:
                from airflow_task_state.api.app import create_app  # on first use: see the class docstring

                self._app = create_app()
            return self._app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        app = self._app or self.build()
        if not self._serving:
            self._serving = True
            from airflow_task_state.api.app import start_serving

            start_serving()
        await app(scope, receive, send)


STATE_API = LazyStateApp()


class StateApiAtStart:
    """
    A root middleware of Airflow's app. Starlette makes it as the API server starts (Airflow's app
    handles its lifespan), the one moment a plugin's code runs there before the first request: it
    builds the state API then, in a thread, so that the first task to touch state after a start
    does not wait for it (0.5 to 1 s on a busy machine), and collects and freezes the heap there
    (``[state] freeze_gc_after_startup``); and at the lifespan, with
    ``[state] serve_task_requests_first``, it puts the task routes before Airflow's middleware
    (see ``api/task_requests_first.py``), and it follows the lifespan so that the connections of
    the statements on the event loop are kept while it lasts and closed as it ends
    (``airflow_db/event_loop.py``). It passes every request on untouched.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        threading.Thread(target=_build_state_api, name="state-api-build", daemon=True).start()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            if config.serve_task_requests_first():
                from airflow_task_state.api.task_requests_first import serve_task_requests_first

                if not serve_task_requests_first(scope.get("app"), STATE_API):
                    log.warning(
                        "Task state requests go through Airflow's middleware: the state API's mount "
                        "was not found"
                    )
            receive = _following_the_lifespan(receive)
        await self.app(scope, receive, send)


def _following_the_lifespan(receive: Any) -> Any:
    """*receive* of a lifespan, which starts and ends what the statements on the event loop keep."""
    from airflow_task_state.airflow_db import event_loop

    async def received() -> Any:
        message = await receive()
        if message["type"] == "lifespan.startup":
            event_loop.serve_here()
        elif message["type"] == "lifespan.shutdown":
            await event_loop.dispose()
        return message

    return received


def _build_state_api() -> None:
    try:
        STATE_API.build()
    except Exception:  # the first state request builds it again, and answers with the error
        log.exception("Could not build the state API as the API server started")
        return
    from airflow_task_state.api.app import freeze_heap_at_start

    freeze_heap_at_start()


class TaskStatePlugin(AirflowPlugin):
    name = "task_state"
    fastapi_apps = [{"app": STATE_API, "url_prefix": URL_PREFIX, "name": "Task state API"}]
    fastapi_root_middlewares = [
        {"middleware": StateApiAtStart, "name": "Task state API, built and put first at start"}
    ]
    react_apps = state_react_apps()
    # Starts the try's handshake, and clears its state on success if configured (task processes).
    listeners = [try_listener]


# Only dag.test() serves the state API inside the task's own process: it alone imports the API there.
def _in_process_transport() -> httpx.BaseTransport:
    from a2wsgi import ASGIMiddleware

    from airflow_task_state.api.app import create_app

    # Both are a valid ASGI app and WSGI callable; FastAPI, a2wsgi and httpx each spell the
    # protocol types their own way, and mypy cannot see they agree.
    return httpx.WSGITransport(app=ASGIMiddleware(create_app()))  # type: ignore[arg-type]


def _grant_in_process(ti: Any) -> dict[str, Any]:
    from airflow_task_state.airflow_db.first_touch import discard_what_a_clear_left
    from airflow_task_state.api.credentials import grant_in_process
    from airflow_task_state.worker.handshake import keep_choice_field

    # As the grant for a proof does: what a clear left for the try to discard is gone before it reads.
    discard_what_a_clear_left(str(ti.id), keep_choice_field(getattr(ti, "task", None)))
    return grant_in_process(ti)


client.in_process_api = client.InProcessApi(transport=_in_process_transport, credential=_grant_in_process)
