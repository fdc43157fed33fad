"""SimpleTuner's queue endpoints (docs/scheduling.md): stats, my jobs, a job's position
(`queue.read`), and the policy's limits under its concurrency names (`*` to change them).
Registered before the queue's `/api/queue/{job_id}` routes, which would otherwise take
these paths."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import ALL, QUEUE_READ
from gpufleet.domain.policy import Policy
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.capacity import CostsOut
from gpufleet.server.schemas.jobs import JobOut
from gpufleet.server.schemas.policy import (
    ConcurrencyIn,
    ConcurrencyOut,
    MeOut,
    PositionOut,
    StatsOut,
)
from gpufleet.server.services import policy, queue, simpletuner_queue
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue policy"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Admin = Annotated[Principal, Depends(require(ALL))]


def _concurrency_out(p: Policy) -> ConcurrencyOut:
    return ConcurrencyOut(**simpletuner_queue.compat_view(p))


@router.get("/api/queue/stats", response_model=StatsOut)
async def stats(ctx: Ctx, who: Reader) -> StatsOut:
    s = await simpletuner_queue.stats(ctx)
    lim = s.policy.limits
    by_status = dict(s.by_status)
    for ours, theirs in simpletuner_queue.COMPAT_STATUS.items():
        by_status[theirs] = by_status.get(ours, 0)
    return StatsOut(
        queue_depth=s.queue_depth,
        running=s.running,
        max_concurrent=lim.max_jobs,
        user_max_concurrent=lim.user_max_jobs,
        team_max_concurrent=lim.team_max_jobs,
        max_gpus=lim.max_gpus,
        team_max_gpus=lim.team_max_gpus,
        user_max_gpus=lim.user_max_gpus,
        user_max_queued=lim.user_max_queued,
        fair_share=s.policy.fair_share,
        avg_wait_seconds=s.avg_wait_seconds,
        by_status=by_status,
        by_user=s.by_user,
        cost=CostsOut.of(s.cost),
    )


@router.get("/api/queue/me", response_model=MeOut)
async def me(ctx: Ctx, who: Reader) -> MeOut:
    mine = await simpletuner_queue.me(ctx, who.user.id)
    names = await queue.job_names(ctx, [*mine.pending, *mine.running, *mine.blocked])
    return MeOut(
        pending_count=len(mine.pending),
        running_count=len(mine.running),
        blocked_count=len(mine.blocked),
        best_position=mine.best_position,
        pending_jobs=[JobOut.listed(j, names) for j in mine.pending],
        running_jobs=[JobOut.listed(j, names) for j in mine.running],
        blocked_jobs=[JobOut.listed(j, names) for j in mine.blocked],
    )


@router.get("/api/queue/position/{job_id}", response_model=PositionOut)
async def position(ctx: Ctx, who: Reader, job_id: str) -> PositionOut:
    p = await simpletuner_queue.position(ctx, job_id)
    return PositionOut(
        job_id=p.job.id,
        status=p.job.status.value,
        position=p.position,
        ahead=(p.position or 1) - 1,
        ahead_by_share=p.ahead_by_share,
    )


@router.get("/api/queue/concurrency", response_model=ConcurrencyOut)
async def get_concurrency(ctx: Ctx, who: Reader) -> ConcurrencyOut:
    current, _row = await policy.get_policy(ctx)
    return _concurrency_out(current)


@router.post("/api/queue/concurrency", response_model=ConcurrencyOut)
async def set_concurrency(
    ctx: Ctx, who: Admin, client: Client, body: ConcurrencyIn
) -> ConcurrencyOut:
    changes = simpletuner_queue.compat_changes(body.changes())
    return _concurrency_out(await policy.set_policy(ctx, changes, who.actor, client))
