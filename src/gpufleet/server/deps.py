"""FastAPI dependencies: the context, the caller's address, and who the caller is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Header, Request

from gpufleet import logs
from gpufleet.domain.records import Worker
from gpufleet.server.context import Context
from gpufleet.server.services import auth, sessions
from gpufleet.server.services.auth import Principal


def get_ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def client_addr(request: Request) -> str | None:
    return request.client.host if request.client else None


# FastAPI runs a plain `def` dependency on a worker thread: two thread hops a request for
# reading an attribute. These run on the event loop.
async def _ctx(request: Request) -> Context:
    return get_ctx(request)


async def _client(request: Request) -> str | None:
    return client_addr(request)


Ctx = Annotated[Context, Depends(_ctx)]
Client = Annotated[str | None, Depends(_client)]


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def require(permission: str | None) -> Callable[..., Awaitable[Principal]]:
    """The caller's principal, if it may do `permission` (None: any valid key)."""

    async def dependency(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> Principal:
        presented = _bearer(authorization) or (x_api_key.strip() if x_api_key else None)
        cookie = request.cookies.get(sessions.SESSION_COOKIE)
        if presented is None and cookie:
            # The web UI calls the same API with its session cookie, CSRF-checked on writes.
            csrf = request.headers.get(sessions.CSRF_HEADER)
            return await sessions.authenticate(
                get_ctx(request), cookie, csrf, request.method, permission
            )
        return await auth.authenticate_key(
            get_ctx(request), presented, permission, client_addr(request)
        )

    return dependency


async def current_worker(
    request: Request, x_worker_token: Annotated[str | None, Header()] = None
) -> Worker:
    action = request.url.path.rsplit("/", 1)[-1]
    worker = await auth.authenticate_worker(
        get_ctx(request), x_worker_token, client_addr(request), action
    )
    logs.bind(worker_id=worker.id)
    return worker


CurrentWorker = Annotated[Worker, Depends(current_worker)]


async def bind_log_ids(request: Request) -> None:
    """Label the request's log lines, uvicorn's access line included, with the job or worker
    its path names (each request runs in its own task, so the labels end with it)."""
    params = request.path_params
    logs.bind(worker_id=params.get("worker_id"), job_id=params.get("job_id"))
