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
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from gpufleet.domain import jsonpolicy
from gpufleet.errors import InvalidInput

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

        async def read_json_anyway(request: Request) -> Response:
            body = await request.body()
            if not body:  # an empty body stays no body: some routes take none
                return await handler(request)
            declared = declares_json(request.headers.get("content-type"))
            try:
                parsed = await request.json()  # kept on the request: FastAPI reads it from there
            except RecursionError:
                raise InvalidInput(not_json("it is nested too deeply to read")) from None
            except ValueError:  # UnicodeDecodeError included
                if declared:  # FastAPI's own answer says where the parser stopped
                    return await handler(request)
                raise InvalidInput(not_json()) from None
            refuse_unstorable(parsed)
            return await handler(request if declared else _as_json(request, body))

        return read_json_anyway


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
