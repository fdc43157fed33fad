"""Approving and rejecting a job the policy holds for approval (`queue.approve`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from gpufleet.domain.permissions import QUEUE_APPROVE
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.jobs import JobOut
from gpufleet.server.services import approvals, queue
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue policy"])
Approver = Annotated[Principal, Depends(require(QUEUE_APPROVE))]


@router.post("/api/queue/{job_id}/approve", response_model=JobOut)
async def approve(ctx: Ctx, who: Approver, client: Client, job_id: str) -> JobOut:
    job = await approvals.approve(ctx, job_id, who.actor, client, by=who.user)
    return JobOut.of(job, await queue.job_names(ctx, [job]))


@router.post("/api/queue/{job_id}/reject", response_model=JobOut)
async def reject(
    ctx: Ctx,
    who: Approver,
    client: Client,
    job_id: str,
    reason: Annotated[str, Query(max_length=500, pattern=r"^[^\x00-\x1f]*$")] = "",
) -> JobOut:
    job = await approvals.reject(ctx, job_id, reason, who.actor, client, by=who.user)
    return JobOut.of(job, await queue.job_names(ctx, [job]))
