"""The door: a URL that names what no database can hold is refused before any route reads
it, and a request refused before its body was read ends its connection.

PostgreSQL cannot compare text with a NUL character in it (the query fails), so a `%00` in a
path or a query parameter would be a 500 wherever the value reaches a query. Only the API's
URLs reach the database; the web pages read theirs as text (`/signin?next=`, made safe
there). Bodies have the same rule and more in `jsonbody`, checked against `domain.jsonpolicy`.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


# Answers given before the body is read: no credentials or wrong ones (401), not allowed or
# no CSRF token (403), too many failures (429), too large by its Content-Length (413).
REFUSED_UNREAD = frozenset({401, 403, 413, 429})


class CloseAfterRefusal:
    """A request refused at the door, its body unread, is answered `Connection: close`.

    Kept alive, uvicorn would receive the rest of the body, megabytes perhaps, only to drop
    it: three anonymous clients sending 4 MB bodies kept the event loop busy reading and took
    `/healthz` to hundreds of milliseconds. Closed, the connection costs the server the bytes
    already in flight; a client that sends `Expect: 100-continue` (curl, over 1 MB) sends none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        read = False

        async def reading() -> Message:
            nonlocal read
            message = await receive()
            read = read or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        async def closing(message: Message) -> None:
            if (
                message["type"] == "http.response.start"
                and not read
                and message["status"] in REFUSED_UNREAD
            ):
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, reading, closing)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False
