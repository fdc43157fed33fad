"""Routes served by one plain Starlette function, declared to FastAPI for the document alone.

A job is four requests, three of them a worker's reports, and a fleet's heartbeats are most of
the rest (#39). On those FastAPI's own work was a tenth of the server's CPU: solving each
dependency as a sub-request of its own, validating the endpoint's answer against its response
model and encoding it again. A `PlainRoute` keeps FastAPI's declaration of its endpoint (the
parameters, the body, the response model: the OpenAPI document and the door's test read it),
and serves it with `serve`, which does what FastAPI did, in its order, with its answers:

1. the route's credentials settled from the headers, before the body is read (the door);
2. the body read, parsed and checked as every JSON body is (`jsonbody.parse`);
3. its dependencies called with the request, in the order declared: only those that take the
   request alone (`deps.TAKE_THE_REQUEST`), so there is nothing to solve;
4. path, query and header parameters and the body validated by FastAPI's own functions, so a
   refusal is FastAPI's 422, field by field, with its `loc`s;
5. the endpoint's answer written as the JSON of the model it returned (or sent as the
   response it returned), unvalidated: the endpoint built it from the model.

A route that declares anything else (another dependency, a cookie, a form) fails at import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import request_response

from gpufleet.server.deps import TAKE_THE_REQUEST
from gpufleet.server.jsonbody import JsonBodyRoute, credentials, parse

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class PlainRoute(JsonBodyRoute):
    """A route whose requests `serve` answers, FastAPI's handler left unbuilt, wrapped as
    Starlette wraps an endpoint (FastAPI's wrapper adds two exit stacks a request, for
    dependencies that yield: these have none)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        if self.max_body_size is not None:  # the app's BodyLimit is the one limit
            raise TypeError(f"{path}: a plain route takes no max_body_size")
        self.app = request_response(self.get_route_handler())

    def get_route_handler(self) -> Handler:
        return serve(self)


def serve(route: JsonBodyRoute) -> Handler:
    dependant = route.dependant
    refused = [sub.call for sub in dependant.dependencies if sub.call not in TAKE_THE_REQUEST]
    if refused or dependant.cookie_params or len(dependant.body_params) > 1:
        raise TypeError(f"{route.path}: not a route a plain endpoint serves ({refused})")
    calls: list[tuple[str | None, Callable[[Request], Awaitable[Any]]]] = [
        (sub.name, cast(Callable[[Request], Awaitable[Any]], sub.call))
        for sub in dependant.dependencies
    ]
    doors = credentials(dependant)
    endpoint = dependant.call
    if endpoint is None:
        raise TypeError(f"{route.path}: no endpoint")
    body_params = dependant.body_params
    sources = (
        (dependant.path_params, "path_params"),
        (dependant.query_params, "query_params"),
        (dependant.header_params, "headers"),
    )
    params = [(fields, source) for fields, source in sources if fields]
    status = route.status_code or 200

    async def answer(request: Request) -> Response:
        for credential in doors:  # refused here, the body is never read (uvicorn drops it)
            await credential.settle(request)
        values: dict[str, Any] = {}
        errors: list[Any] = []
        body: Any = PydanticUndefined
        if body_params and (read := await request.body()):
            body = await parse(read, request.headers.get("content-type"))
        for name, call in calls:
            solved = await call(request)
            if name is not None:
                values[name] = solved
        for fields, source in params:
            found, wrong = request_params_to_args(fields, getattr(request, source))
            values.update(found)
            errors += wrong
        if body_params:
            found, wrong = await request_body_to_args(body_params, body, False)
            values.update(found)
            errors += wrong
        if errors:
            raise RequestValidationError(errors)
        result = await endpoint(**values)
        if isinstance(result, Response):
            return result
        if isinstance(result, BaseModel):
            content = result.__pydantic_serializer__.to_json(result)
            return Response(content, status_code=status, media_type="application/json")
        return JSONResponse(result, status_code=status)

    return answer
