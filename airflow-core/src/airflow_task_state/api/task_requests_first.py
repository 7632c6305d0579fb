"""
Task code's state requests served before Airflow's own middleware (``[state] serve_task_requests_first``).

Airflow wraps every request of its API server in its HTTP access log, GZip and the JWT refresh of
UI sessions (which runs each request in an extra task), and plugins' root middlewares run inside
them: together they cost a task's state request more than the state API's own work does. None of
them serves a task's request: it is not a browser session, its answer is small, and its credential
is checked by the state API. So the API server's outermost app sends the task routes (a try's
credentials, its own state, its assets' state) straight to the state API's mount, exactly where
Airflow's router would; every other request, the state API's operator routes and UI included, goes
through Airflow's stack as before.
"""

from __future__ import annotations

from typing import Any

from starlette.routing import Match, Mount

from airflow_task_state.protocol import ASSET_PREFIX, CREDENTIALS_PATH

# Below the state API's mount: what task processes call. The operator API (/api/v1) and the UI
# (/ui) are called by people, with Airflow's session and its middleware.
TASK_PATHS = ("/task-instances/", ASSET_PREFIX + "/", CREDENTIALS_PATH)


class TaskRequestsFirst:
    """Airflow's middleware stack, behind a fork that sends task requests to the state API's mount."""

    def __init__(self, airflow_stack: Any, state_mount: Mount) -> None:
        self.airflow_stack = airflow_stack
        self.state_mount = state_mount

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            match, child = self.state_mount.matches(scope)
            if match is Match.FULL and scope["path"].removeprefix(child["root_path"]).startswith(TASK_PATHS):
                scope.update(child)
                await self.state_mount.handle(scope, receive, send)
                return
        await self.airflow_stack(scope, receive, send)


def serve_task_requests_first(airflow_app: Any, state_app: Any) -> bool:
    """
    Put the fork in front of *airflow_app*'s middleware stack (built when its lifespan starts), if
    *state_app* is mounted on it; whether the fork is in place. Anything unexpected leaves the app
    as it is.
    """
    stack = getattr(airflow_app, "middleware_stack", None)
    router = getattr(airflow_app, "router", None)
    if isinstance(stack, TaskRequestsFirst):
        return True
    if stack is None or router is None:
        return False
    for route in router.routes:
        if isinstance(route, Mount) and route.app is state_app:
            airflow_app.middleware_stack = TaskRequestsFirst(stack, route)
            return True
    return False
