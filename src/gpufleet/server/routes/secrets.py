"""Secrets for jobs (`queue.submit` to write one's own; a team's: its leads and admins;
`queue.read` to list the names one may see). No route ever answers a value."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.secrets import SecretIn, SecretList, SecretOut
from gpufleet.server.services import job_secrets
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api", tags=["secrets"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Writer = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]


@router.get("/secrets", response_model=SecretList)
async def list_secrets(ctx: Ctx, who: Reader) -> SecretList:
    """Your secrets, your teams' (every one, for admins): names, never values."""
    listed = await job_secrets.list_visible(ctx, who.user)
    return SecretList(secrets=[SecretOut.of(s) for s in listed])


@router.put("/secrets/{name}", response_model=SecretOut)
async def put_own_secret(
    ctx: Ctx, who: Writer, client: Client, name: str, body: SecretIn
) -> SecretOut:
    """Set your own secret `name` (jobs you submit refer to it as {"secret": name})."""
    listed = await job_secrets.put(ctx, who.user, None, name, body.value, who.actor, client)
    return SecretOut.of(listed)


@router.delete("/secrets/{name}", response_model=Ok)
async def delete_own_secret(ctx: Ctx, who: Writer, client: Client, name: str) -> Ok:
    await job_secrets.delete(ctx, who.user, None, name, who.actor, client)
    return Ok()


@router.put("/teams/{team}/secrets/{name}", response_model=SecretOut)
async def put_team_secret(
    ctx: Ctx, who: Writer, client: Client, team: str, name: str, body: SecretIn
) -> SecretOut:
    """Set team `team`'s secret (its leads and admins): its members' jobs fall back to it."""
    listed = await job_secrets.put(ctx, who.user, team, name, body.value, who.actor, client)
    return SecretOut.of(listed)


@router.delete("/teams/{team}/secrets/{name}", response_model=Ok)
async def delete_team_secret(ctx: Ctx, who: Writer, client: Client, team: str, name: str) -> Ok:
    await job_secrets.delete(ctx, who.user, team, name, who.actor, client)
    return Ok()
