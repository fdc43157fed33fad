"""FastAPI dependencies: the context, the caller's address, and who the caller is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Generic, TypeVar, cast

from fastapi import Depends, Header, Request

from gpufleet import logs
from gpufleet.domain.records import Worker
from gpufleet.server.context import Context
from gpufleet.server.services import attempt_tokens, auth, sessions
from gpufleet.server.services.auth import Principal

T = TypeVar("T")


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


class Credential(Generic[T]):
    """A route's authentication, read from the request's headers alone.

    `jsonbody.JsonBodyRoute` settles it before it reads the body, so that a request without
    valid credentials is refused unread (docs/security.md, "The door"); FastAPI then asks it
    as a dependency and gets the same answer, kept on the request."""

    async def check(self, request: Request) -> T:
        raise NotImplementedError

    async def settle(self, request: Request) -> T:
        settled: dict[Credential[Any], Any] = request.scope.setdefault(_SETTLED, {})
        if self not in settled:
            settled[self] = await self.check(request)
        return cast(T, settled[self])


_SETTLED = "gpufleet.credentials"


class KeyOrSession(Credential[Principal]):
    """An API key (bearer or X-API-Key), else the web UI's session cookie, CSRF-checked on
    writes; the caller's principal if it may do `permission` (None: any valid key)."""

    def __init__(self, permission: str | None) -> None:
        self.permission = permission

    async def check(self, request: Request) -> Principal:
        headers = request.headers
        api_key = headers.get("x-api-key")
        presented = _bearer(headers.get("authorization")) or (api_key.strip() if api_key else None)
        cookie = request.cookies.get(sessions.SESSION_COOKIE)
        if presented is not None and presented.startswith(sessions.TOKEN_PREFIX):
            # `gpufleet login`'s short-lived session token (single sign-on)
            return await sessions.authenticate_token(get_ctx(request), presented, self.permission)
        if presented is None and cookie:
            # The web UI calls the same API with its session cookie, CSRF-checked on writes.
            csrf = headers.get(sessions.CSRF_HEADER)
            return await sessions.authenticate(
                get_ctx(request), cookie, csrf, request.method, self.permission
            )
        return await auth.authenticate_key(
            get_ctx(request), presented, self.permission, client_addr(request)
        )

    async def __call__(  # the headers are named for the OpenAPI document; `check` reads them
        self,
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> Principal:
        return await self.settle(request)


def require(permission: str | None) -> Callable[..., Awaitable[Principal]]:
    """The caller's principal, if it may do `permission` (None: any valid key)."""
    return KeyOrSession(permission).__call__


class WorkerToken(Credential[Worker]):
    """The worker its `X-Worker-Token` names."""

    async def check(self, request: Request) -> Worker:
        action = request.scope["path"].rsplit("/", 1)[-1]  # request.url builds a URL
        return await auth.authenticate_worker(
            get_ctx(request), request.headers.get("x-worker-token"), client_addr(request), action
        )

    async def __call__(
        self, request: Request, x_worker_token: Annotated[str | None, Header()] = None
    ) -> Worker:
        worker = await self.settle(request)
        logs.bind(worker_id=worker.id)  # here, after bind_log_ids: a route's own labels win
        return worker


current_worker = WorkerToken().__call__


def credential_of(dependency: Callable[..., Any] | None) -> Credential[Any] | None:
    """The credential a dependency settles, if it is one. Dependencies are the credentials'
    bound `__call__`: FastAPI reads the annotations of a function, not of an instance."""
    owner = getattr(dependency, "__self__", None)
    return owner if isinstance(owner, Credential) else None


CurrentWorker = Annotated[Worker, Depends(current_worker)]
# The attempt's own token beside the worker's, on every call about a job (attempt_tokens).
AttemptToken = Annotated[
    str | None, Header(alias=attempt_tokens.HEADER, min_length=1, max_length=128)
]


async def bind_log_ids(request: Request) -> None:
    """Label the request's log lines, uvicorn's access line included, with the job or worker
    its path names (each request runs in its own task, so the labels end with it)."""
    params = request.path_params
    logs.bind(worker_id=params.get("worker_id"), job_id=params.get("job_id"))


# The dependencies that take the request alone (a worker token's header is named for the
# OpenAPI document; the credential reads it itself): a plain route (server/plain.py) calls
# them directly, without FastAPI solving them.
TAKE_THE_REQUEST = frozenset({bind_log_ids, current_worker, _ctx, _client})
