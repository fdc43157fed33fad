"""The web UI: sign-in, and pages that call the same JSON API a script would.

Pages are templates with no data in them; each page's module fetches `/api/...` with the
session cookie and follows `/api/events`. A page the key lacks the permission for is neither
linked nor served.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlsplit

import orjson
from fastapi import Query, Request
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.responses import JSONResponse, RedirectResponse, Response

from gpufleet import __version__
from gpufleet.domain.audit_events import EVENT_TYPES, FAMILIES
from gpufleet.domain.job_secrets import SECRET_NAME
from gpufleet.domain.jobspec import CONFIG_NAME, CONFIG_NAME_RULE
from gpufleet.domain.levels import ADMIN_USER_ID, Level
from gpufleet.domain.permissions import (
    ADMIN_AUDIT,
    ADMIN_WORKERS,
    ALL,
    LEVEL_PERMISSIONS,
    PERMISSION_HELP,
    QUEUE_APPROVE,
    QUEUE_READ,
    QUEUE_SUBMIT,
)
from gpufleet.domain.permissions import allows as key_allows
from gpufleet.domain.policy import LEVEL_PRIORITY
from gpufleet.domain.records import LOCAL_WORKER_ID
from gpufleet.domain.webhooks import FORMAT_HELP, SUBSCRIPTION_HELP
from gpufleet.errors import Forbidden, InvalidInput, Unauthenticated
from gpufleet.server.context import Context
from gpufleet.server.deps import Client, Ctx
from gpufleet.server.jsonbody import declares_json, is_json
from gpufleet.server.local import parse_local_gpus
from gpufleet.server.routes import api_router
from gpufleet.server.services import fleet, queue, sessions, sweeps

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
templates = Jinja2Templates(directory=UI_DIR / "templates")
router = api_router(include_in_schema=False)

# Scripts and styles from this origin only: no inline code, nothing from elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Page:
    path: str
    title: str
    permission: str | None  # None: every signed-in key

    def open_to(self, perms: frozenset[str]) -> bool:
        return self.permission is None or key_allows(perms, self.permission)


WORKERS = Page("/workers", "Workers", ADMIN_WORKERS)
FLEET = Page("/fleet", "Fleet", None)  # read-only workers and the fleet over time
CAPACITY = Page("/capacity", "Capacity", QUEUE_READ)  # the pools, read-only but for `*`
TRAIN = Page("/train", "Train", QUEUE_SUBMIT)
QUEUE = Page("/queue", "Queue", QUEUE_READ)
SWEEPS = Page("/sweeps", "Sweeps", QUEUE_READ)
TEAMS = Page("/teams", "Teams", QUEUE_READ)
SECRETS = Page("/secrets", "Secrets", QUEUE_SUBMIT)
AUDIT = Page("/audit", "Audit", ADMIN_AUDIT)
KEYS = Page("/keys", "API keys", ALL)
WEBHOOKS = Page("/webhooks", "Webhooks", ALL)
# the navigation, in order
PAGES = (WORKERS, TRAIN, QUEUE, SWEEPS, TEAMS, FLEET, CAPACITY, SECRETS, AUDIT, KEYS, WEBHOOKS)


def static_files() -> StaticFiles:
    return StaticFiles(directory=UI_DIR / "static")


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    return templates.TemplateResponse(
        request,
        template,
        {"version": __version__, **context},
        status_code=status_code,
        headers=SECURITY_HEADERS,
    )


_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_TAB_OR_NEWLINE = str.maketrans("", "", "\t\n\r")


def safe_next(target: str | None) -> str:
    """Only paths on this site: never `//elsewhere` or `https://elsewhere`, however written.

    Read as a browser's URL parser reads it (WHATWG): leading and trailing C0 controls and
    spaces go, tabs and newlines go anywhere (a tab between two slashes makes `//elsewhere`),
    and a backslash counts as a slash, so none is let through."""
    path = (target or "").strip(_C0_AND_SPACE).translate(_TAB_OR_NEWLINE)
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def _signin_redirect(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/signin?next={quote(here)}", status_code=303)


async def _page(
    ctx: Ctx,
    request: Request,
    page: Page,
    template: str | None = None,
    *,
    status_code: int = 200,
    **extra: Any,
) -> Response:
    principal = await sessions.current(ctx, request.cookies.get(sessions.SESSION_COOKIE))
    if principal is None:
        return _signin_redirect(request)
    perms = principal.permissions
    context: dict[str, Any] = {
        "page": page,
        "nav": [p for p in PAGES if p.open_to(perms)],
        "key_name": principal.key.name,
        "key_id": principal.key.id,
        "user_id": principal.user.id,
        "level": principal.user.level.value,
        "default_priority": LEVEL_PRIORITY[principal.user.level],  # what a submit gets unasked
        "can": {
            p: key_allows(perms, p)
            for p in (ADMIN_WORKERS, QUEUE_SUBMIT, QUEUE_APPROVE, ADMIN_AUDIT, ALL)
        },
        **extra,
    }
    if not page.open_to(perms):
        return render(request, "forbidden.html", 403, **context)
    return render(request, template or f"{page.path.strip('/')}.html", status_code, **context)


@router.get("/")
async def home(ctx: Ctx, request: Request) -> Response:
    principal = await sessions.current(ctx, request.cookies.get(sessions.SESSION_COOKIE))
    if principal is None:
        return _signin_redirect(request)
    first = next((p for p in PAGES if p.open_to(principal.permissions)), None)
    return RedirectResponse(first.path if first else "/queue", status_code=303)


@router.get("/signin")
async def signin_page(
    ctx: Ctx, request: Request, target: Annotated[str | None, Query(alias="next")] = None
) -> Response:
    return render_signin(request, ctx, safe_next(target))


def render_signin(
    request: Request, ctx: Context, target: str, status_code: int = 200, error: str = ""
) -> Response:
    """The sign-in page: an API key, and the provider's button when single sign-on is on."""
    return render(
        request,
        "signin.html",
        status_code,
        next=target,
        nav=[],
        page=None,
        error=error,
        sso_name=ctx.sso.name if ctx.sso else None,
        oidc_only=ctx.settings.oidc_only,
    )


@router.get("/workers")
async def workers_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, WORKERS)


@router.get("/workers/{worker_id}")
async def worker_page(ctx: Ctx, request: Request, worker_id: str) -> Response:
    return await _page(ctx, request, WORKERS, "worker.html", worker_id=worker_id)


@router.get("/fleet")
async def fleet_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, FLEET, sample_every_s=ctx.settings.fleet_sample_interval)


@router.get("/capacity")
async def capacity_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, CAPACITY)


@router.get("/train")
async def train_page(ctx: Ctx, request: Request) -> Response:
    # The page checks a name with the domain's own pattern and says the domain's rule.
    rule: dict[str, Any] = {
        "config_name_pattern": CONFIG_NAME.pattern,
        "config_name_rule": CONFIG_NAME_RULE,
    }
    # The local runner's GPUs ("": off, "?": not registered yet), so that the page says before
    # a submit that a local job asking more would be refused.
    local_gpus = "?"
    if not parse_local_gpus(ctx.settings.local_gpus)[0]:
        local_gpus = ""
    elif (local := await fleet.find_worker(ctx, LOCAL_WORKER_ID)) and local.registered:
        local_gpus = str(local.gpu_count)
    return await _page(ctx, request, TRAIN, local_gpus=local_gpus, **rule)


@router.get("/queue")
async def queue_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, QUEUE)


@router.get("/queue/{job_id}")
async def job_page(ctx: Ctx, request: Request, job_id: str) -> Response:
    if not await queue.job_exists(ctx, job_id):
        why = "it was deleted, or the address is mistyped"
        return await _missing(ctx, request, QUEUE, f"job {job_id}", why)
    return await _page(ctx, request, QUEUE, "job.html", job_id=job_id)


async def _missing(ctx: Ctx, request: Request, back: Page, what: str, why: str) -> Response:
    """The page of a job or sweep there is none of (404), pointing back to their list."""
    said: dict[str, Any] = {"heading": f"No {what}", "missing": what, "why": why}
    kind = what.split()[0]  # "job", "sweep"
    said |= {"back_path": back.path, "back_title": back.title, "back_hint": f"lists the {kind}s"}
    return await _page(ctx, request, back, "not_found.html", status_code=404, **said)


@router.get("/sweeps")
async def sweeps_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, SWEEPS)


@router.get("/sweeps/{sweep_id}")
async def sweep_page(ctx: Ctx, request: Request, sweep_id: str) -> Response:
    if not await sweeps.exists(ctx, sweep_id):
        return await _missing(ctx, request, SWEEPS, f"sweep {sweep_id}", "the address is mistyped")
    return await _page(ctx, request, SWEEPS, "sweep.html", sweep_id=sweep_id)


async def not_found_page(request: Request) -> Response:
    """A browser's unknown address: a page of the UI saying so (a script gets JSON)."""
    ctx = request.app.state.ctx
    principal = await sessions.current(ctx, request.cookies.get(sessions.SESSION_COOKIE))
    perms = principal.permissions if principal else frozenset()
    return render(
        request,
        "not_found.html",
        404,
        nav=[p for p in PAGES if principal and p.open_to(perms)],
        page=None,
        key_name=principal.key.name if principal else None,
        heading="Page not found",
        missing=f"page at {request.url.path}",
        why="check the address",
        back_path="/",
        back_title="Go to the start page",
        back_hint="of the UI",
    )


@router.get("/teams")
async def teams_page(ctx: Ctx, request: Request) -> Response:
    levels = [level.value for level in Level]
    return await _page(ctx, request, TEAMS, levels=levels, builtin_admin=ADMIN_USER_ID)


@router.get("/secrets")
async def secrets_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, SECRETS, secret_name_pattern=SECRET_NAME.pattern)


@router.get("/audit")
async def audit_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, AUDIT, audit_types=[*FAMILIES, *sorted(EVENT_TYPES)])


@router.get("/keys")
async def keys_page(ctx: Ctx, request: Request) -> Response:
    # What a key of each level's user may hold, so the dialog offers no more than that.
    most = {level.value: sorted(perms) for level, perms in LEVEL_PERMISSIONS.items()}
    return await _page(ctx, request, KEYS, permissions=PERMISSION_HELP, level_permissions=most)


@router.get("/webhooks")
async def webhooks_page(ctx: Ctx, request: Request) -> Response:
    return await _page(ctx, request, WEBHOOKS, subscriptions=SUBSCRIPTION_HELP, formats=FORMAT_HELP)


# ---- the session ------------------------------------------------------------------------


def _same_origin(request: Request) -> bool:
    """A browser names the page that sent a POST; refuse sign-ins from other sites."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser's cross-site POST: scripts and same-origin forms
    return origin != "null" and urlsplit(origin).netloc == request.headers.get("host")


async def _credentials(request: Request) -> tuple[str | None, str | None, bool]:
    """(api key, next page, came from an HTML form) from a JSON or urlencoded body; JSON
    whatever the Content-Type says, as on every API route (a form never parses as JSON)."""
    body = await request.body()
    if declares_json(request.headers.get("content-type")) or is_json(body):
        try:
            data = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise InvalidInput('the body is not JSON; send {"api_key": "..."}') from exc
        if not isinstance(data, dict):
            raise InvalidInput('send a JSON object: {"api_key": "..."}')
        key, target = data.get("api_key"), data.get("next")
        return (
            key.strip() if isinstance(key, str) else None,
            target if isinstance(target, str) else None,
            False,
        )
    try:
        form = parse_qs(body.decode(errors="replace"), max_num_fields=8)
    except ValueError as exc:
        raise InvalidInput("too many form fields; send api_key and next only") from exc
    keys, targets = form.get("api_key", []), form.get("next", [])
    return (keys[0].strip() or None if keys else None), (targets[0] if targets else None), True


@router.post("/ui/session")
async def sign_in(ctx: Ctx, client: Client, request: Request) -> Response:
    """Exchange an API key for an HttpOnly, SameSite=Strict session cookie."""
    if not _same_origin(request):
        raise Forbidden("sign-in from another site refused; open the orchestrator's own page")
    presented, target, from_form = await _credentials(request)
    target = safe_next(target)
    try:
        session = await sessions.sign_in(ctx, presented, client)
    except Unauthenticated as exc:
        if not from_form:
            raise
        return render_signin(request, ctx, target, 401, exc.message)
    response: Response = (
        RedirectResponse(target, status_code=303)
        if from_form
        else JSONResponse({"ok": True, "next": target})
    )
    return with_session(request, response, session)


def with_session(request: Request, response: Response, session: sessions.Session) -> Response:
    """The response, setting the session's cookies."""
    secure = request.url.scheme == "https"
    response.set_cookie(
        sessions.SESSION_COOKIE,
        session.cookie,
        max_age=session.max_age,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )
    response.set_cookie(
        sessions.CSRF_COOKIE,
        session.csrf,
        max_age=session.max_age,
        httponly=False,  # the page's script echoes it in the X-CSRF-Token header
        samesite="strict",
        secure=secure,
        path="/",
    )
    return response


@router.delete("/ui/session")
async def sign_out(ctx: Ctx, request: Request) -> Response:
    cookie = request.cookies.get(sessions.SESSION_COOKIE)
    await sessions.sign_out(ctx, cookie, request.headers.get(sessions.CSRF_HEADER))
    response = JSONResponse({"ok": True, "next": "/signin"})
    response.delete_cookie(sessions.SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    response.delete_cookie(sessions.CSRF_COOKIE, path="/", samesite="strict")
    return response
