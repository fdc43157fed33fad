"""The queue's sharing policy: read (`queue.read`) and change (`*`) it (docs/scheduling.md).
Registered before the queue's `/api/queue/{job_id}` routes, which would otherwise take
these paths."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import ALL, QUEUE_READ
from gpufleet.domain.policy import Policy
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.policy import PolicyIn, PolicyOut
from gpufleet.server.services import policy
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue policy"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Admin = Annotated[Principal, Depends(require(ALL))]


def _policy_out(p: Policy, row: dict[str, object] | None = None) -> PolicyOut:
    row = row or {}
    return PolicyOut(
        **policy.policy_view(p), updated_at=row.get("updated_at"), updated_by=row.get("updated_by")
    )


@router.get("/api/queue/policy", response_model=PolicyOut)
async def get_policy(ctx: Ctx, who: Reader) -> PolicyOut:
    current, row = await policy.get_policy(ctx)
    return _policy_out(current, row)


@router.patch("/api/queue/policy", response_model=PolicyOut)
async def set_policy(ctx: Ctx, who: Admin, client: Client, body: PolicyIn) -> PolicyOut:
    await policy.set_policy(ctx, body.changes(), who.actor, client)
    current, row = await policy.get_policy(ctx)
    return _policy_out(current, row)
