"""Worker pools (`*`: a pool's provider runs commands on this machine and spends money)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import ALL
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.pools import CreatePool, PoolDetail, PoolList, PoolOut, UpdatePool
from gpufleet.server.services import pools
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api/admin/pools", tags=["admin"])
Root = Annotated[Principal, Depends(require(ALL))]


@router.get("", response_model=PoolList)
async def list_pools(ctx: Ctx, who: Root) -> PoolList:
    return PoolList(pools=[PoolOut.of_view(v) for v in await pools.list_pools(ctx)])


@router.post("", response_model=PoolDetail, status_code=201)
async def create_pool(ctx: Ctx, who: Root, client: Client, body: CreatePool) -> PoolDetail:
    """A pool of workers to launch; its launches begin once providers exist (docs/capacity.md)."""
    given = body.model_dump(exclude_unset=True, exclude={"name"})
    return PoolDetail.of_view(await pools.create(ctx, body.name, given, who.actor, client))


@router.get("/{name}", response_model=PoolDetail)
async def get_pool(ctx: Ctx, who: Root, name: str) -> PoolDetail:
    return PoolDetail.of_view(await pools.get_pool(ctx, name))


@router.patch("/{name}", response_model=PoolDetail)
async def update_pool(
    ctx: Ctx, who: Root, client: Client, name: str, body: UpdatePool
) -> PoolDetail:
    changes = body.model_dump(exclude_unset=True)
    return PoolDetail.of_view(await pools.update(ctx, name, changes, who.actor, client))


@router.delete("/{name}", response_model=Ok)
async def delete_pool(ctx: Ctx, who: Root, client: Client, name: str) -> Ok:
    """Refused (409) while a launch of the pool may have a machine up."""
    await pools.delete(ctx, name, who.actor, client)
    return Ok()
