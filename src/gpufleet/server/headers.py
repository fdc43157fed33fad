"""The headers every answer carries, added where the answer starts (a pure ASGI middleware:
nothing buffered, one pass over a handful of headers per request).

Every answer says `X-Content-Type-Options: nosniff`, so a browser never reads a JSON body or
an artifact as a page or a script. Every answer of the API, and any JSON answer (errors of
any route included), says `Cache-Control: no-store`: it holds a fleet's data for one reader,
and no browser or proxy keeps it. Static assets keep their validators and stay cacheable;
the pages set their own headers (`routes.ui.SECURITY_HEADERS`). A route that sets its own
`Cache-Control` keeps it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")
NO_STORE = (b"cache-control", b"no-store")


class ResponseHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        api = scope["path"].startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                sniff = cache = json = False
                for name, value in headers:
                    if name == b"x-content-type-options":
                        sniff = True
                    elif name == b"cache-control":
                        cache = True
                    elif name == b"content-type":
                        json = b"json" in value
                if not sniff:
                    headers.append(NOSNIFF)
                if not cache and (api or json):
                    headers.append(NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
