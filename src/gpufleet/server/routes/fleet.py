"""The fleet for every signed-in key (any level, any permission): the workers, read-only,
and the fleet over time. What an admin does to a worker is `admin.py`'s."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from gpufleet.domain.presence import presence_tones, tally
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.fleet import (
    FleetHistoryOut,
    FleetSampleOut,
    FleetWorkerList,
    FleetWorkerOut,
)
from gpufleet.server.services import fleet, fleet_history
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api/fleet", tags=["fleet"])
SignedIn = Annotated[Principal, Depends(require(None))]


@router.get("/workers", response_model=FleetWorkerList)
async def list_workers(ctx: Ctx, who: SignedIn) -> FleetWorkerList:
    workers = await fleet.list_workers(ctx)
    return FleetWorkerList(
        workers=[FleetWorkerOut.of(w) for w in workers],
        counts=tally(workers),
        tones=presence_tones(),
    )


@router.get("/history", response_model=FleetHistoryOut)
async def history(
    ctx: Ctx,
    who: SignedIn,
    span: Annotated[str | None, Query(alias="range", max_length=40)] = None,
    group: Annotated[str | None, Query(max_length=400)] = None,
) -> FleetHistoryOut:
    """One label group's samples (the whole fleet unless `group=key=value`) over `range`:
    hour (default), day, week, or 30m, 6h, 3d; at most 7d."""
    found = await fleet_history.history(ctx, span, group)
    return FleetHistoryOut(
        range_s=int(found.span.total_seconds()),
        resolution_s=found.tier.resolution_s,
        group=found.group,
        groups=found.groups,
        samples=[FleetSampleOut.of_sample(s) for s in found.samples],
    )
