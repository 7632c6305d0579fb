"""The FastAPI app of the state API, and the lazy ASGI wrapper the plugin mounts."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI


def create_app() -> FastAPI:
    from airflow.state.api.errors import database_unavailable, validation_error
    from airflow.state.api.routes import router
    from fastapi.exceptions import RequestValidationError
    from sqlalchemy.exc import DBAPIError

    app = FastAPI(
        title="Airflow task state API",
        description=(
            "Task and asset state for code running in Airflow tasks (AIP-103). Every request carries a "
            "short-lived bearer token, signed with `[state] api_secret`, naming one task instance."
        ),
        version="1",
    )
    app.include_router(router)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(DBAPIError, database_unavailable)
    return app


class LazyStateApp:
    """
    An ASGI app that builds the FastAPI app on its first request.

    Airflow imports plugins in every process, task processes included; they should not pay for
    building routes and schemas they never serve.
    """

    def __init__(self) -> None:
        self._app: FastAPI | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = create_app()
        await self._app(scope, receive, send)
