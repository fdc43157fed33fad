"""The pools as every reader sees them (`queue.read`): what each does now and why, its
launches, its failures and its cost (docs/capacity.md). Changing a pool is `pools.py`'s (`*`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import QUEUE_READ
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.capacity import CapacityOut
from gpufleet.server.services import capacity
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api/capacity", tags=["capacity"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]


@router.get("", response_model=CapacityOut)
async def get_capacity(ctx: Ctx, who: Reader) -> CapacityOut:
    """Every pool: its fields (a command provider's programs only), what it does now and
    why, its live launches and newest failures, and what the pools cost, by pool, team and
    user."""
    return CapacityOut.of(await capacity.capacity(ctx))
