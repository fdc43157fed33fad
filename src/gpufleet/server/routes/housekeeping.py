"""Housekeeping (`*`): delete long-ended jobs, a dispatch pass now. Registered with
the other named paths of `/api/queue/`, before the queue's `/api/queue/{job_id}` routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from gpufleet.domain.permissions import ALL
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.policy import CleanupOut, ProcessOut
from gpufleet.server.services import housekeeping
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue policy"])
Admin = Annotated[Principal, Depends(require(ALL))]


@router.post("/api/queue/cleanup", response_model=CleanupOut)
async def cleanup(
    ctx: Ctx, who: Admin, client: Client, days: Annotated[int, Query(ge=1, le=365)] = 30
) -> CleanupOut:
    deleted = await housekeeping.cleanup(ctx, days, who.actor, client)
    return CleanupOut(success=True, deleted=deleted, days=days)


@router.post("/api/queue/process", response_model=ProcessOut)
async def process(ctx: Ctx, who: Admin) -> ProcessOut:
    return ProcessOut(success=True, offered=await housekeeping.process(ctx))
