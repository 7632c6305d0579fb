"""
The answer to a request that carried a proof hands the task process the credential the proof
earned, in its headers (see :mod:`.authentication`).
"""

from __future__ import annotations

from typing import Any

# Where a request's answer finds the headers of the credential its proof earned (the request's state).
ISSUED_CREDENTIAL = "airflow_task_state_issued_credential"


class IssuedCredentialHeaders:
    """
    ASGI middleware: the answer to a proof's request carries the credential it earned, whatever the
    route answers (a 404 too: a task's first call is often the read of a job id it has not stored yet).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def with_credential(message: dict[str, Any]) -> None:
            issued = scope.get("state", {}).get(ISSUED_CREDENTIAL)
            if message["type"] == "http.response.start" and issued:
                message = {**message, "headers": [*message.get("headers", []), *issued]}
            await send(message)

        await self.app(scope, receive, with_credential)
