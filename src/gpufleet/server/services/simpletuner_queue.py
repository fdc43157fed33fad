"""What SimpleTuner's queue endpoints answer (docs/simpletuner.md): its names for the
concurrency limits, the queue's stats, a user's jobs and a job's place in the queue."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gpufleet.domain.policy import Policy
from gpufleet.domain.records import Job
from gpufleet.domain.states import PLACED_JOB, SIMPLETUNER_STATUS, JobStatus
from gpufleet.server.context import Context
from gpufleet.server.services.capacity import CostSummary, cost_summary
from gpufleet.server.services.lifecycle import no_job
from gpufleet.server.services.policy import policy_view
from gpufleet.server.services.waiting import Position, position_in, ranked_queue

COMPAT_FIELDS = {  # SimpleTuner's /api/queue/concurrency names → ours
    "max_concurrent": "max_jobs",
    "user_max_concurrent": "user_max_jobs",
    "team_max_concurrent": "team_max_jobs",
    "enable_fair_share": "fair_share",
}


def compat_changes(body: Mapping[str, Any]) -> dict[str, Any]:
    """SimpleTuner's concurrency fields as ours; ours pass as they are."""
    return {COMPAT_FIELDS.get(k, k): v for k, v in body.items()}


def compat_view(policy: Policy) -> dict[str, Any]:
    """Every field of the policy, and SimpleTuner's names for those it has (COMPAT_FIELDS)."""
    ours = policy_view(policy)
    return {**{theirs: ours[name] for theirs, name in COMPAT_FIELDS.items()}, **ours}


COMPAT_STATUS = {ours.value: theirs for ours, theirs in SIMPLETUNER_STATUS.items()}


@dataclass(frozen=True, slots=True)
class Stats:
    queue_depth: int
    running: int
    policy: Policy
    avg_wait_seconds: float | None
    by_status: dict[str, int]
    by_user: dict[str, int]  # user name → jobs queued, waiting for approval or placed
    cost: CostSummary  # the pools' cost, and the teams' and users' shares


async def stats(ctx: Context, window: timedelta = timedelta(days=1)) -> Stats:
    now = ctx.clock()
    async with ctx.store.read() as q:
        policy = await q.get_policy()
        counts = await q.jobs_by_status_user()
        waits = await q.waits_started(now - window)
        names = {u.id: u.name for u in await q.list_users()}
        cost = await cost_summary(q, now)
    by_status: Counter[str] = Counter()
    by_user: Counter[str] = Counter()
    live = {JobStatus.QUEUED.value, JobStatus.PENDING_APPROVAL.value} | {
        s.value for s in PLACED_JOB
    }
    for status, user_id, n in counts:
        by_status[status] += n
        if status in live:
            by_user[names.get(user_id or "", user_id or "(none)")] += n
    seconds = [max(0.0, (o - c).total_seconds()) for c, o in waits]
    return Stats(
        queue_depth=by_status[JobStatus.QUEUED.value],
        running=sum(by_status[s.value] for s in PLACED_JOB),
        policy=policy,
        avg_wait_seconds=sum(seconds) / len(seconds) if seconds else None,
        by_status=dict(by_status),
        by_user=dict(by_user),
        cost=cost,
    )


async def position(ctx: Context, job_id: str) -> Position:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        if job is None:
            raise no_job(job_id)
        if job.status is not JobStatus.QUEUED:
            return Position(job, None)
        ranked = await ranked_queue(q, ctx.clock())
    return position_in(ranked, job)


@dataclass(frozen=True, slots=True)
class Mine:
    pending: list[Job]
    running: list[Job]
    blocked: list[Job]
    best_position: int | None


async def me(ctx: Context, user_id: str) -> Mine:
    wanted = {JobStatus.QUEUED, JobStatus.PENDING_APPROVAL, *PLACED_JOB}
    async with ctx.store.read() as q:
        jobs = await q.user_jobs(user_id, wanted)
        pending = [j for j in jobs if j.status is JobStatus.QUEUED]
        ranked = await ranked_queue(q, ctx.clock()) if pending else None
    positions = [position_in(ranked, j).position for j in pending] if ranked else []
    best = min((p for p in positions if p is not None), default=None)
    return Mine(
        pending=pending,
        running=[j for j in jobs if j.status in PLACED_JOB],
        blocked=[j for j in jobs if j.status is JobStatus.PENDING_APPROVAL],
        best_position=best,
    )
