"""
Serves the UI's JavaScript module and icons from the state API (``/state/ui/...``).

The module is hand-written (no build step, see ``state.js``); module scripts are MIME-checked by
browsers, so it is answered as ``text/javascript``. An ETag lets browsers revalidate cheaply.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request, Response

router = APIRouter(prefix="/ui", include_in_schema=False)

#: File name -> media type: everything this router serves, and nothing else.
FILES = {
    "state.js": "text/javascript; charset=utf-8",
    "state.svg": "image/svg+xml",
    "state-dark.svg": "image/svg+xml",
}


@cache
def _read(name: str) -> tuple[bytes, str]:
    """The file's bytes and a strong ETag of them."""
    body = Path(__file__).with_name(name).read_bytes()
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@router.get("/{name}")
def ui_file(name: str, request: Request) -> Response:
    if name not in FILES:
        raise HTTPException(404, "Not Found")
    body, etag = _read(name)
    # no-cache: revalidate every time (a 304 costs nothing), so an upgraded module is never stale.
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=FILES[name], headers=headers)
