"""The FastAPI app of the state API (plugin.py mounts it, built on the first request)."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from airflow_task_state import config
from airflow_task_state.airflow_db import event_loop
from airflow_task_state.api.credential_headers import IssuedCredentialHeaders
from airflow_task_state.api.errors import EXCEPTION_HANDLERS
from airflow_task_state.api.handshake import router as handshake_router
from airflow_task_state.api.operator.routes import router as operator_router
from airflow_task_state.api.plain_requests import PlainTaskValues
from airflow_task_state.api.request_checks import json_declared, plain_path_parameters
from airflow_task_state.api.routes import router
from airflow_task_state.api.staged_routes import router as staged_router
from airflow_task_state.api.ui.static import router as ui_router

log = logging.getLogger(__name__)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Runs where the state API is an app of its own (tests); mounted in Airflow's app, the plugin's
    # root middleware follows Airflow's lifespan instead.
    event_loop.serve_here()
    yield
    await event_loop.dispose()


def create_app() -> FastAPI:
    app = FastAPI(
        title="Airflow task state API",
        description=(
            "Task and asset state for code running in Airflow tasks (AIP-103). A task process first "
            "proves which task instance it runs, through its supervisor's authenticated Execution API "
            "channel, then redeems that proof (`/credentials`); every state request then carries the "
            "short-lived credential it got, which names that task instance and try."
        ),
        version="1",
        # Before every route's own dependencies, Airflow's access checks included.
        dependencies=[Depends(plain_path_parameters), Depends(json_declared)],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=_lifespan,
    )
    if config.retired_api_secret_is_set():
        log.warning(
            "[state] api_secret is set but no longer used: task processes now prove their identity "
            "through Airflow's Execution API. Remove it from every worker and API server."
        )
    for included in (handshake_router, router, staged_router, operator_router, ui_router):
        app.include_router(included)
    app.add_middleware(IssuedCredentialHeaders)
    # Added last, so outermost: a plain request of task code skips the rest (see plain_requests.py).
    app.add_middleware(PlainTaskValues, handlers=app.exception_handlers)
    return app


def start_serving() -> None:
    """
    Once, at the state API's first request, with ``[state] freeze_gc_after_startup``: what Airflow
    built for its own first requests since the start (its DAG bag, its caches) is frozen too, without
    a collection (``gc.freeze()`` takes no time; the full collection ran as the API server started,
    see :func:`freeze_heap_at_start`), so the first task to touch state waits for no collector pause.
    """
    if config.freeze_gc_after_startup():
        gc.freeze()


def freeze_heap_at_start() -> None:
    """
    As the API server starts, once the state API is built, with ``[state] freeze_gc_after_startup``:
    move every object alive then out of the collector's reach.

    An API server's heap after start-up is hundreds of thousands of long-lived objects (modules,
    routes, schemas), and each full collection scans them all: under load ``bench/bench_load.py``
    measured pauses of seconds that stop every thread. Frozen, they are never scanned again; the
    garbage among them is collected first so that none is kept forever. The first state request
    freezes what came since (:func:`start_serving`); what is garbage in a cycle at that moment stays.
    """
    if config.freeze_gc_after_startup():
        gc.collect()
        gc.freeze()
