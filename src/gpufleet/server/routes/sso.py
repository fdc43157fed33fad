"""Single sign-on's routes (services/sso_flows.py): the browser's sign-in at the provider
and its callback, and the CLI's (`gpufleet login`) code, refresh and sign-out."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request
from starlette.responses import RedirectResponse, Response

from gpufleet.errors import DomainError
from gpufleet.server.deps import Client, Ctx
from gpufleet.server.routes import api_router
from gpufleet.server.routes.ui import render, render_signin, safe_next, with_session
from gpufleet.server.schemas.sso import CliSessionOut, RedeemCode, Refresh, SsoInfo
from gpufleet.server.services import sessions, sso, sso_flows

router = api_router()
ui_router = api_router(include_in_schema=False)


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


@router.get("/api/sso", response_model=SsoInfo, tags=["sso"])
async def info(ctx: Ctx) -> SsoInfo:
    """What `gpufleet login` needs to sign in at the provider (no credentials needed)."""
    if ctx.sso is None:
        return SsoInfo(enabled=False)
    meta = await ctx.sso.metadata()
    return SsoInfo(
        enabled=True,
        issuer=ctx.sso.issuer,
        client_id=ctx.sso.client_id,
        provider_name=ctx.sso.name,
        scopes=list(ctx.sso.scopes),
        authorization_endpoint=str(meta["authorization_endpoint"]),
        oidc_only=ctx.settings.oidc_only,
    )


def _out(found: sso_flows.CliSession) -> CliSessionOut:
    return CliSessionOut(
        token=found.token,
        expires_at=found.expires_at,
        refresh_token=found.refresh_token,
        user=found.user,
        level=found.level,
    )


@router.post("/api/sso/token", response_model=CliSessionOut, tags=["sso"])
async def redeem(ctx: Ctx, client: Client, body: RedeemCode) -> CliSessionOut:
    """The CLI's authorization code (with its PKCE verifier and nonce) for a short-lived
    session token and the provider's refresh token."""
    found = await sso_flows.redeem(
        ctx, body.code, body.code_verifier, body.redirect_uri, body.nonce, client
    )
    return _out(found)


@router.post("/api/sso/refresh", response_model=CliSessionOut, tags=["sso"])
async def refresh(ctx: Ctx, client: Client, body: Refresh) -> CliSessionOut:
    """A new session token for the provider's refresh token; the person's level and teams
    read again from the provider."""
    return _out(await sso_flows.refresh(ctx, body.refresh_token, client))


@router.delete("/api/sso/session", tags=["sso"])
async def sign_out(request: Request, ctx: Ctx) -> dict[str, bool]:
    """End the CLI session whose token is the bearer (`gpufleet logout`)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip().startswith(sessions.TOKEN_PREFIX):
        await sessions.end_token(ctx, token.strip())
    return {"ok": True}


@ui_router.get("/ui/sso/begin")
async def begin(
    ctx: Ctx, request: Request, target: Annotated[str | None, Query(alias="next")] = None
) -> Response:
    sso.provider(ctx)
    begun = await sso_flows.begin(ctx, _base_url(request), safe_next(target))
    response = RedirectResponse(begun.url, status_code=303)
    response.set_cookie(
        sso_flows.STATE_COOKIE,
        begun.cookie,
        max_age=sso_flows.STATE_SECONDS,
        httponly=True,
        samesite="lax",  # the provider's redirect back is a cross-site top-level GET
        secure=request.url.scheme == "https",
        path="/ui/sso",
    )
    return response


@ui_router.get("/ui/sso/callback")
async def callback(
    ctx: Ctx,
    request: Request,
    client: Client,
    code: str | None = None,
    state: str | None = None,
    error: str | None = None,
    error_description: str | None = None,
) -> Response:
    cookie = request.cookies.get(sso_flows.STATE_COOKIE)
    try:
        if error:
            raise sso_flows.Refused(
                f"the identity provider said {error[:80]}: {(error_description or '')[:200]}; "
                "sign in again"
            )
        session, target = await sso_flows.finish(
            ctx, _base_url(request), cookie, code, state, client
        )
    except DomainError as exc:
        response = render_signin(request, ctx, "/", exc.status_code, exc.message)
        response.delete_cookie(sso_flows.STATE_COOKIE, path="/ui/sso")
        return response
    # A page of ours moves on: the session cookie is SameSite=Strict, and a redirect in the
    # provider's cross-site chain would arrive without it.
    page = render(request, "signed_in.html", next=safe_next(target), nav=[], page=None)
    page.delete_cookie(sso_flows.STATE_COOKIE, path="/ui/sso")
    return with_session(request, page, session)
