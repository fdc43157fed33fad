"""Every API route that takes a JSON body reads it as JSON, whatever its Content-Type says.

`curl -d` sends `application/x-www-form-urlencoded` unless told otherwise, and so do the
specification's own examples; other clients send no type, or `text/plain`. FastAPI reads a
body as JSON only under a JSON type and hands anything else to validation as bytes (a 422
that names no field). Here a body is JSON when it parses as JSON, and a body that does not
is refused in one sentence that says to send JSON. Routes that take a form (none does; the
web sign-in reads its own body) and routes without a body are left as they are.
"""

from __future__ import annotations

import email.message
import itertools
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from gpufleet.domain import jsonpolicy
from gpufleet.errors import InvalidInput, PayloadTooLarge
from gpufleet.server.deps import Credential, credential_of

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
EXAMPLE = """-d '{"name": "gpu-1"}'"""


def not_json(why: str | None = None) -> str:
    """What to tell a client whose body is not JSON; `why` says where the parser stopped."""
    where = f" ({why})" if why else ""
    return f"the request body is not JSON{where}: send a JSON object, such as {EXAMPLE}"


def declares_json(content_type: str | None) -> bool:
    """FastAPI's own rule: `application/json`, or `application/<anything>+json`."""
    if not content_type:
        return False
    if content_type.partition(";")[0] == "application/json":  # nearly every request
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        return False
    return True


class JsonBodyRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        handler: Handler = super().get_route_handler()
        field = self.body_field
        if field is None or isinstance(field.field_info, params.Form):
            return handler
        doors = credentials(self.dependant)

        async def read_json_anyway(request: Request) -> Response:
            for credential in doors:  # refused here, the body is never read (uvicorn drops it)
                await credential.settle(request)
            body = await request.body()
            if not body:  # an empty body stays no body: some routes take none
                return await handler(request)
            parsed = await parse(body, request.headers.get("content-type"))
            if not declares_json(request.headers.get("content-type")):
                request = _as_json(request, body)
            request._json = parsed  # FastAPI reads the body from Request.json(), kept here
            return await handler(request)

        return read_json_anyway


async def parse(body: bytes, content_type: str | None) -> Any:
    """A body (not empty) parsed and checked (`read_checked`). One that is not JSON is refused
    as FastAPI refuses a body it reads as JSON, where the parser stopped, when its type says
    JSON; else in one sentence that says to send JSON."""
    try:
        if len(body) <= INLINE_BYTES:
            return read_checked(body)
        return await run_in_threadpool(read_checked, body)  # never hold the event loop long
    except ValueError as exc:  # UnicodeDecodeError included
        if not declares_json(content_type):
            raise InvalidInput(not_json()) from None
        if isinstance(exc, json.JSONDecodeError):
            raise RequestValidationError(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", exc.pos),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": exc.msg},
                    }
                ]
            ) from exc
        raise HTTPException(400, "There was an error parsing the body") from exc


INLINE_BYTES = 64 * 1024  # can hold no more than 32,769 values: never near the limit
TOO_MANY = (
    f"the request body holds more than {jsonpolicy.MAX_VALUES:,} JSON values; "
    "send fewer (split a long list over several requests)"
)


def credentials(dependant: Dependant) -> list[Credential[Any]]:
    """The credentials a route's dependencies settle, in the order FastAPI solves them."""
    found: list[Credential[Any]] = []
    for sub in dependant.dependencies:
        found += credentials(sub)
        credential = credential_of(sub.call)
        if credential is not None:
            found.append(credential)
    return found


def _let_others_run() -> None:
    """Give up the GIL for a moment: on a worker thread, the event loop's turn comes now
    rather than at the next forced switch (5 ms)."""
    time.sleep(0)


def read_checked(body: bytes) -> Any:
    """The body parsed, if it is JSON the fleet takes: at most `MAX_VALUES` values (counted
    before parsing), each one the policy stores. ValueError: it is not JSON."""
    if jsonpolicy.more_values_than(body, jsonpolicy.MAX_VALUES, _let_others_run):
        raise PayloadTooLarge(TOO_MANY)
    try:
        parsed = json.loads(body)
    except RecursionError:
        raise InvalidInput(not_json("it is nested too deeply to read")) from None
    refuse_unstorable(parsed)
    return parsed


def refuse_unstorable(parsed: Any) -> None:
    """The input policy of domain.jsonpolicy, at the door: a 422 naming each bad place."""
    found = list(itertools.islice(jsonpolicy.problems(parsed, ("body",)), 10))
    if found:
        raise RequestValidationError(
            [{"loc": p.loc, "msg": p.msg, "type": "value_error.unstorable"} for p in found]
        )


def _as_json(request: Request, body: bytes) -> Request:
    """The request again, typed as JSON, its body (already read) replayed."""
    headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
    headers.append((b"content-type", b"application/json"))
    replayed = False

    async def receive() -> Message:
        nonlocal replayed
        if replayed:
            return await request.receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({**request.scope, "headers": headers}, receive)
