"""Single sign-on's routes (services/sso_flows.py): the browser's sign-in at the provider
and its callback, and the CLI's (`gpufleet login`) code, refresh and sign-out."""

from __future__ import annotations

from typing import Annotated, TypeVar
from urllib.parse import parse_qs

from fastapi import Depends, Query, Request
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse, RedirectResponse, Response

from gpufleet.errors import DomainError, InvalidInput, PayloadTooLarge
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.routes.ui import render, render_signin, safe_next, with_session
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.sso import (
    CliSessionOut,
    DeviceCode,
    DeviceStart,
    Pending,
    RedeemCode,
    Refresh,
    SsoInfo,
)
from gpufleet.server.services import sessions, sso, sso_flows
from gpufleet.server.services.auth import Principal

router = api_router()
Anyone = Annotated[Principal, Depends(require(None))]
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
        device_flow=bool(meta.get("device_authorization_endpoint")),
        oidc_only=ctx.settings.oidc_only,
    )


FORM_MAX_BYTES = 16 * 1024
# OAuth's own token endpoints take forms (RFC 6749, 4.1.3), and so do these: what they read is
# the credential itself (a code, a refresh token), so there is no credential to check first.
FORM_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/x-www-form-urlencoded": {"schema": {"type": "object"}}},
    }
}
T = TypeVar("T", bound=BaseModel)


async def _form(request: Request, model: type[T]) -> T:
    """The urlencoded body, small and with each field once, as `model` says."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > FORM_MAX_BYTES:
        raise PayloadTooLarge(f"the form is over {FORM_MAX_BYTES} bytes; send its fields only")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            raise PayloadTooLarge(f"the form is over {FORM_MAX_BYTES} bytes; send its fields only")
    try:
        fields = parse_qs(body.decode(), max_num_fields=8, strict_parsing=bool(body))
        return model.model_validate({k: v[0] for k, v in fields.items() if len(v) == 1})
    except (ValueError, UnicodeDecodeError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = f" ({'.'.join(map(str, first['loc']))}: {first['msg']})" if first else ""
        names = ", ".join(model.model_fields)
        raise InvalidInput(
            f"send an application/x-www-form-urlencoded body with {names}{where}"
        ) from exc


def _out(found: sso_flows.CliSession) -> CliSessionOut:
    return CliSessionOut(
        token=found.token,
        expires_at=found.expires_at,
        refresh_token=found.refresh_token,
        user=found.user,
        level=found.level,
    )


@router.post("/api/sso/token", response_model=CliSessionOut, tags=["sso"], openapi_extra=FORM_BODY)
async def redeem(ctx: Ctx, client: Client, request: Request) -> CliSessionOut:
    """The CLI's authorization code (with its PKCE verifier, redirect URI and nonce) for a
    short-lived session token and the provider's refresh token."""
    body = await _form(request, RedeemCode)
    found = await sso_flows.redeem(
        ctx, body.code, body.code_verifier, body.redirect_uri, body.nonce, client
    )
    return _out(found)


@router.post(
    "/api/sso/refresh", response_model=CliSessionOut, tags=["sso"], openapi_extra=FORM_BODY
)
async def refresh(ctx: Ctx, client: Client, request: Request) -> CliSessionOut:
    """A new session token for the provider's refresh token; the person's level and teams
    read again from the provider."""
    body = await _form(request, Refresh)
    return _out(await sso_flows.refresh(ctx, body.refresh_token, client))


@router.post("/api/sso/device", response_model=DeviceStart, tags=["sso"])
async def device_start(ctx: Ctx) -> DeviceStart:
    """The device flow (where the provider offers it): a user code for the person to type at
    the provider's page, and the device code the CLI then polls with."""
    return DeviceStart(**await sso_flows.device_start(ctx))


@router.post(
    "/api/sso/device/token",
    response_model=CliSessionOut,
    responses={202: {"model": Pending, "description": "not approved yet: poll again"}},
    tags=["sso"],
    openapi_extra=FORM_BODY,
)
async def device_poll(ctx: Ctx, client: Client, request: Request) -> Response:
    """The session once the person approved the device code at the provider; 202 until
    then."""
    body = await _form(request, DeviceCode)
    found = await sso_flows.device_poll(ctx, body.device_code, client)
    if found is None:
        return JSONResponse(Pending().model_dump(), status_code=202)
    return JSONResponse(_out(found).model_dump(mode="json"))


@router.delete("/api/sso/session", response_model=Ok, tags=["sso"])
async def sign_out(request: Request, ctx: Ctx, who: Anyone) -> Ok:
    """End the CLI session whose token is the bearer (`gpufleet logout`)."""
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    if who.session is None or not token.startswith(sessions.TOKEN_PREFIX):
        raise InvalidInput(
            "this ends a session token of `gpufleet login` (gfs_…), sent as the bearer; an "
            "API key is revoked instead (DELETE /api/admin/api-keys/{key_id})"
        )
    await sessions.end_token(ctx, token)
    return Ok()


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
