"""One table maps every error to its HTTP answer: `{"detail": "<what to fix>"}`."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from gpufleet.errors import (
    ArtifactStoreError,
    DomainError,
    StoreError,
    TooManyRequests,
    WriteConflict,
)
from gpufleet.server.jsonbody import not_json

log = logging.getLogger("gpufleet.server")


def _where(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


async def _domain(_request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, DomainError):
        raise exc  # registered for DomainError only; anything else is not ours to answer
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    if isinstance(exc, TooManyRequests):
        headers = {"Retry-After": str(math.ceil(exc.retry_after))}
    body: dict[str, Any] = {"detail": exc.message}
    if exc.detail_for:  # the same, in the web UI's and the CLI's own terms
        body["detail_for"] = exc.detail_for
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def _broken_json(err: dict[str, Any]) -> str:
    """A body sent as JSON that does not parse: where the parser stopped."""
    loc = err.get("loc", ())
    at = f" at character {loc[1]}" if len(loc) > 1 else ""
    return not_json(f"{err.get('ctx', {}).get('error', 'JSON decode error')}{at}")


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        raise exc
    problems = []
    for err in exc.errors():
        where = _where(tuple(err.get("loc", ())))
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    broken = [e for e in exc.errors() if e.get("type") == "json_invalid"]
    if broken:
        detail = _broken_json(broken[0])
    else:
        detail = "invalid request: " + "; ".join(problems) + "; fix these fields and send again"
    return JSONResponse(
        {
            "detail": detail,
            "errors": [
                {"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
                for e in exc.errors()
            ],
        },
        status_code=422,
    )


def _wants_page(request: Request) -> bool:
    """A browser asking for a page (HTML first in Accept), not a script or an API call."""
    accept = request.headers.get("accept", "")
    return not request.url.path.startswith("/api/") and accept.startswith("text/html")


async def _http(_request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, HTTPException):
        raise exc
    detail = exc.detail
    if exc.status_code == 404 and detail == "Not Found":
        detail = "no such endpoint; see /docs for the API"
    elif exc.status_code == 400 and "parsing the body" in str(detail):
        detail = "the body could not be read: send UTF-8 JSON with Content-Type application/json"
    elif exc.status_code == 413:
        detail = "request body too large (limit 4 MiB); send less"
    elif exc.status_code == 405:
        detail = "method not allowed on this endpoint; see /docs for the API"
    return JSONResponse(
        {"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _store(_request: Request, exc: Exception) -> JSONResponse:
    log.error("database error: %s", exc)
    if isinstance(exc, ArtifactStoreError):  # its message names the store and what to check
        detail = exc.message
    elif isinstance(exc, WriteConflict):
        detail = (
            "the database aborted this write to resolve a conflict with another one; send it again"
        )
    else:
        detail = "the database is unavailable; retry shortly"
    return JSONResponse(
        {"detail": detail},
        status_code=503,
        headers={"Retry-After": "2"},
    )


async def _gone(request: Request, _exc: Exception) -> JSONResponse:
    """A client that went away mid-body (a worker's machine preempted mid-upload): nothing was
    stored, and nobody reads the answer; one line in the log, not a traceback."""
    log.info(
        "%s %s: the client went away before its request body ended; nothing was stored",
        request.method,
        request.url.path,
    )
    return JSONResponse(
        {"detail": "the request body ended before its Content-Length; send it again"},
        status_code=400,
    )


def install(app: FastAPI, page_not_found: Callable[[Request], Awaitable[Response]]) -> None:
    """`page_not_found`: the web UI's answer to a browser's unknown address."""

    async def http(request: Request, exc: Exception) -> Response:
        if (
            isinstance(exc, HTTPException)
            and (exc.status_code, exc.detail) == (404, "Not Found")
            and _wants_page(request)
        ):
            return await page_not_found(request)
        return await _http(request, exc)

    app.add_exception_handler(ClientDisconnect, _gone)
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(StoreError, _store)
