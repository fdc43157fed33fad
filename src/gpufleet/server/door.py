"""A URL that names what no database can hold is refused before any route reads it.

PostgreSQL cannot compare text with a NUL character in it (the query fails), so a `%00` in a
path or a query parameter would be a 500 wherever the value reaches a query. Only the API's
URLs reach the database; the web pages read theirs as text (`/signin?next=`, made safe
there). Bodies have the same rule and more in `jsonbody`, checked against `domain.jsonpolicy`.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

NUL_IN_URL = (
    "the URL holds a NUL character (%00), which no name or id contains; remove it and send again"
)


class RefuseNulInUrl:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/api/")
            and ("\x00" in scope["path"] or b"\x00" in unquote_to_bytes(scope["query_string"]))
        ):
            await JSONResponse({"detail": NUL_IN_URL}, status_code=422)(scope, receive, send)
            return
        await self.app(scope, receive, send)
