"""Stored configs (`queue.read`; `queue.submit` to store or delete one: its owner, the leads
of the team it is shared with and admins may change one, `domain.ownership`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Depends, Path, Query

from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.jobs import ConfigList, ConfigOut, ConfigVersionList, ConfigVersionOut
from gpufleet.server.services import configs
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Submitter = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000)]


@router.get("/api/configs", response_model=ConfigList)
async def list_configs(ctx: Ctx, who: Reader) -> ConfigList:
    found, names = await configs.list_configs(ctx)
    return ConfigList(configs=[ConfigOut.of(c, names, who.user.id) for c in found])


# Before `{name:path}`, which would take `NAME/versions` for a name (names hold no '/').
@router.get("/api/configs/{name}/versions", response_model=ConfigVersionList)
async def list_config_versions(
    ctx: Ctx,
    who: Reader,
    name: str,
    limit: Annotated[int, Query(ge=1, le=configs.MAX_VERSIONS_PAGE)] = 20,
    offset: Offset = 0,
) -> ConfigVersionList:
    """The config's versions, newest first (their bodies: one version at a time)."""
    versions, names = await configs.list_versions(ctx, name, limit, offset)
    return ConfigVersionList(
        name=name,
        versions=[ConfigVersionOut.of(v, names) for v in versions],
        limit=limit,
        offset=offset,
    )


@router.get("/api/configs/{name}/versions/{version}", response_model=ConfigVersionOut)
async def get_config_version(
    ctx: Ctx, who: Reader, name: str, version: Annotated[int, Path(ge=1, le=2**31 - 1)]
) -> ConfigVersionOut:
    found, names = await configs.get_version(ctx, name, version)
    return ConfigVersionOut.of(found, names, viewer_id=who.user.id)


@router.get("/api/configs/{name:path}", response_model=ConfigOut)
async def get_config(ctx: Ctx, who: Reader, name: str) -> ConfigOut:
    view = await configs.get_config(ctx, name)
    return ConfigOut.of(view.config, view.names, who.user.id)


@router.put("/api/configs/{name:path}", response_model=ConfigOut)
async def put_config(
    ctx: Ctx,
    who: Submitter,
    client: Client,
    name: str,
    body: Annotated[dict[str, Any], Body()],
    team: Annotated[
        str | None,
        Query(
            max_length=64,
            description="share it with this team (id or name; one of the owner's); empty: "
            "with none; left out: as it is",
        ),
    ] = None,
) -> ConfigOut:
    """Store the config (a new one is the caller's) as its next version. Only its owner,
    the leads of the team it is shared with and admins may overwrite one."""
    view, _created = await configs.put_config(
        ctx, name, body, who.user, who.actor, client, team=team
    )
    return ConfigOut.of(view.config, view.names, who.user.id)


@router.delete("/api/configs/{name:path}", response_model=Ok)
async def delete_config(ctx: Ctx, who: Submitter, client: Client, name: str) -> Ok:
    """The config and its versions: its owner, the leads of its team and admins only."""
    await configs.delete_config(ctx, name, who.user, who.actor, client)
    return Ok()
