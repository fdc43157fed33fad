"""The queue policy (limits, fair share, preemption and approval rules), the state it ranks
by, approvals, and what the queue's compatible endpoints answer (docs/scheduling.md).

Every decision is `domain.policy`'s; this module reads what it decides on and writes what
it decided."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.levels import Level
from gpufleet.domain.matching import Wait, WaitCode
from gpufleet.domain.ownership import JobAction
from gpufleet.domain.policy import (
    COUNT_FIELDS,
    POLICY_FIELDS,
    SWITCH_FIELDS,
    LimitHit,
    Policy,
    Snapshot,
    limit_hit,
    rank_key,
)
from gpufleet.domain.records import Job, User
from gpufleet.domain.states import PLACED_JOB, SIMPLETUNER_STATUS, JobStatus
from gpufleet.errors import Conflict, InvalidInput
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import JOBS_TOPIC
from gpufleet.server.services import dispatch, job_artifacts, ownership
from gpufleet.server.services.lifecycle import move_job, no_job
from gpufleet.server.services.standing import candidate, is_plain, snapshot
from gpufleet.store import Queries
from gpufleet.store.queries.policy import policy_of

CLEANUP_BATCH = 500
MAX_RANKED = 100_000  # queued jobs a position is counted among
MAX_LIMIT = 1_000_000
COMPAT_FIELDS = {  # SimpleTuner's /api/queue/concurrency names → ours
    "max_concurrent": "max_jobs",
    "user_max_concurrent": "user_max_jobs",
    "team_max_concurrent": "team_max_jobs",
    "enable_fair_share": "fair_share",
}


async def get_policy(ctx: Context) -> tuple[Policy, dict[str, Any]]:
    """The policy, and its row (who changed it, when)."""
    async with ctx.store.read() as q:
        row = await q.policy_row()
    return (policy_of(row) if row else Policy()), row


# ---- changing the policy -----------------------------------------------------------------

_SECONDS = {  # each of SECONDS_FIELDS: (least, most)
    "half_life_s": (60.0, 10 * 365 * 86400.0),
    "min_runtime_s": (0.0, 365 * 86400.0),
    "preempt_grace_s": (0.0, 86400.0),
}


def check_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes as they are stored; each refused field says what it takes."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name in COUNT_FIELDS:
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT
            ):
                raise InvalidInput(f"{name} is a count from 0 to {MAX_LIMIT}, or null: no limit")
            out[name] = value
        elif name in SWITCH_FIELDS:
            if not isinstance(value, bool):
                raise InvalidInput(f"{name} is true or false")
            out[name] = value
        elif name in _SECONDS:
            least, most = _SECONDS[name]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not least <= value <= most
            ):
                raise InvalidInput(f"{name} is a number of seconds from {least:g} to {most:g}")
            out[name] = float(value)
        elif name == "approve_levels":
            if not isinstance(value, list | tuple | set | frozenset) or any(
                v not in Level.__members__.values() for v in value
            ):
                allowed = ", ".join(level.value for level in Level)
                raise InvalidInput(f"approve_levels lists levels among: {allowed}")
            out[name] = sorted({str(v) for v in value})
        else:
            raise InvalidInput(
                f"unknown policy field {name!r}; use one of {', '.join(POLICY_FIELDS)}"
            )
    return out


async def set_policy(
    ctx: Context, changes: Mapping[str, Any], actor: str, client: str | None
) -> Policy:
    """Change some of the policy's fields (audited), then dispatch: a limit may have risen."""
    values = check_changes(changes)
    async with transaction(ctx) as tx:
        before = await tx.q.policy_row(lock=True)
        if values:
            await tx.q.update_policy({**values, "updated_at": tx.now, "updated_by": actor})
            old = {k: before.get(k) for k in values}
            tx.audit("queue.policy_changed", actor, "queue_policy", client, old=old, new=values)
        policy = await tx.q.get_policy()
    if values:
        await dispatch.dispatch_all(ctx)
    return policy


def compat_changes(body: Mapping[str, Any]) -> dict[str, Any]:
    """SimpleTuner's concurrency fields as ours; ours pass as they are."""
    return {COMPAT_FIELDS.get(k, k): v for k, v in body.items()}


def compat_view(policy: Policy) -> dict[str, Any]:
    """Every field of the policy, and SimpleTuner's names for those it has (COMPAT_FIELDS)."""
    ours = policy_view(policy)
    return {**{theirs: ours[name] for theirs, name in COMPAT_FIELDS.items()}, **ours}


def policy_view(policy: Policy) -> dict[str, Any]:
    lim = policy.limits
    return {
        "max_jobs": lim.max_jobs,
        "max_gpus": lim.max_gpus,
        "team_max_jobs": lim.team_max_jobs,
        "team_max_gpus": lim.team_max_gpus,
        "user_max_jobs": lim.user_max_jobs,
        "user_max_gpus": lim.user_max_gpus,
        "user_max_queued": lim.user_max_queued,
        "fair_share": policy.fair_share,
        "half_life_s": policy.half_life_s,
        "preemption": policy.preemption,
        "min_runtime_s": policy.min_runtime_s,
        "preempt_grace_s": policy.preempt_grace_s,
        "approve_gpus_over": policy.approve_gpus_over,
        "approve_levels": sorted(level.value for level in policy.approve_levels),
    }


# ---- approvals ---------------------------------------------------------------------------


def _not_pending(job: Job) -> Conflict:
    return Conflict(
        f"job {job.id} is {job.status.value}, not waiting for approval; only a job in "
        "pending_approval can be approved or rejected"
    )


async def approve(ctx: Context, job_id: str, actor: str, client: str | None, *, by: User) -> Job:
    """A held job joins the queue, and is offered if a worker fits now; `by` is an admin or
    a lead of its team other than its owner (`domain.ownership`)."""
    async with transaction(ctx) as tx:
        job = await tx.q.get_job(job_id, lock=True)
        if job is None:
            raise no_job(job_id)
        await ownership.require(tx.q, by, job, JobAction.APPROVE)
        if job.status is not JobStatus.PENDING_APPROVAL:
            raise _not_pending(job)
        tx.audit("job.approved", actor, job.id, client)
        await move_job(tx, job, JobStatus.QUEUED, actor, approved_by=actor)
    await dispatch.dispatch_job(ctx, job_id)
    return await _job(ctx, job_id)


async def reject(
    ctx: Context, job_id: str, reason: str, actor: str, client: str | None, *, by: User
) -> Job:
    """A held job is cancelled, saying who rejected it (`by`: as for `approve`) and why."""
    reason = reason.strip()
    async with transaction(ctx) as tx:
        job = await tx.q.get_job(job_id, lock=True)
        if job is None:
            raise no_job(job_id)
        await ownership.require(tx.q, by, job, JobAction.REJECT)
        if job.status is not JobStatus.PENDING_APPROVAL:
            raise _not_pending(job)
        error = f"rejected by {by.name}: {reason}" if reason else f"rejected by {by.name}"
        tx.audit("job.rejected", actor, job.id, client, reason=reason)
        # A cancel like any other: its webhooks (job.cancelled) go with it.
        await move_job(tx, job, JobStatus.CANCELLED, actor, error=error, ended_at=tx.now)
    return await _job(ctx, job_id)


async def _job(ctx: Context, job_id: str) -> Job:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
    if job is None:
        raise no_job(job_id)
    return job


# ---- what the compatible endpoints answer ------------------------------------------------

COMPAT_STATUS = {ours.value: theirs for ours, theirs in SIMPLETUNER_STATUS.items()}


@dataclass(frozen=True, slots=True)
class Stats:
    queue_depth: int
    running: int
    policy: Policy
    avg_wait_seconds: float | None
    by_status: dict[str, int]
    by_user: dict[str, int]  # user name → jobs queued, waiting for approval or placed


async def stats(ctx: Context, window: timedelta = timedelta(days=1)) -> Stats:
    now = ctx.clock()
    async with ctx.store.read() as q:
        policy = await q.get_policy()
        counts = await q.jobs_by_status_user()
        waits = await q.waits_started(now - window)
        names = {u.id: u.name for u in await q.list_users()}
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
    )


@dataclass(frozen=True, slots=True)
class Ranked:
    """The queue in the order it is offered (`rank_key`), with the snapshot that ranked it."""

    snap: Snapshot
    order: list[Job]
    places: dict[str, int] = field(default_factory=dict)  # job id → index in `order`

    @classmethod
    def of(cls, snap: Snapshot, queued: Sequence[Job]) -> Ranked:
        order = sorted(queued, key=lambda j: rank_key(candidate(j, snap), snap))
        return cls(snap, order, {j.id: n for n, j in enumerate(order)})


async def ranked_queue(q: Queries, now: datetime) -> Ranked:
    return Ranked.of(await snapshot(q, now), await q.all_queued(MAX_RANKED))


@dataclass(frozen=True, slots=True)
class Position:
    job: Job
    position: int | None  # 1: offered next; None: not queued (or past the jobs ranked)
    ahead_by_share: int = 0  # jobs ahead only because their team is further below its share


def position_in(ranked: Ranked, job: Job) -> Position:
    """1 + the queued jobs ranked before it; of those, the ones of other teams that its own
    priority and age would have put behind it (fair share put them first)."""
    place = ranked.places.get(job.id)
    if job.status is not JobStatus.QUEUED or place is None:
        return Position(job, None)
    snap = ranked.snap
    by_share = 0
    if snap.policy.fair_share:
        plain = replace(snap, policy=replace(snap.policy, fair_share=False))
        mine = rank_key(candidate(job, plain), plain)
        by_share = sum(
            1
            for j in ranked.order[:place]
            if j.team_id != job.team_id and rank_key(candidate(j, plain), plain) > mine
        )
    return Position(job, 1 + place, by_share)


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


# ---- housekeeping ------------------------------------------------------------------------


async def cleanup(ctx: Context, days: int, actor: str, client: str | None) -> int:
    """Delete jobs that ended more than `days` days ago (1 to 365), their files in the
    artifact store first; never an active job, nor one whose artifacts an admin pinned."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365:
        raise InvalidInput("days is a whole number from 1 to 365")
    before = ctx.clock() - timedelta(days=days)
    deleted = 0
    while True:
        async with ctx.store.read() as q:
            ids = await q.old_terminal_jobs(before, CLEANUP_BATCH)
            files = await q.artifacts_of_jobs(ids) if ids else []
            checkpoints = await q.checkpoints_of_jobs(ids) if ids else []
        if files or checkpoints:  # a blob that cannot go keeps its job, for the next try
            await job_artifacts.remove(
                ctx,
                files,
                [c.id for c in checkpoints],
                actor,
                client,
                reason=lambda _job: f"cleanup: the job ended over {days} days ago",
            )
        async with transaction(ctx) as tx:
            n = await tx.q.delete_jobs(ids)
            deleted += n
            if len(ids) < CLEANUP_BATCH:
                tx.audit("queue.cleaned", actor, None, client, days=days, deleted=deleted)
                if deleted:
                    tx.wake(JOBS_TOPIC)
                return deleted


async def process(ctx: Context) -> int:
    """Run a full dispatch pass now; the offers it made."""
    return await dispatch.dispatch_all(ctx)


# ---- why it waits ------------------------------------------------------------------------

_LIMIT_WAIT = {"fleet": WaitCode.FLEET_AT_LIMIT, "team": WaitCode.TEAM_AT_LIMIT}


def _limit_wait(hit: LimitHit) -> Wait:
    code = _LIMIT_WAIT.get(hit.code.value.split("_", 1)[0], WaitCode.USER_AT_LIMIT)
    return Wait(
        code,
        {
            "limit_hit": str(hit),
            "limit_code": hit.code.value,
            "scope": hit.scope_name,
            "limit": hit.limit,
            "count": hit.count,
        },
    )


async def policy_wait(q: Queries, job: Job, now: datetime) -> Wait | None:
    """What the policy holds the job back for, if anything: an approval, a limit, or the
    jobs of teams further below their share ranked before it."""
    if job.status is JobStatus.PENDING_APPROVAL:
        return Wait(WaitCode.AWAITING_APPROVAL, {"job": job.id})
    if job.status is not JobStatus.QUEUED:
        return None
    policy, own = await q.dispatch_policy()
    if is_plain(policy, own):
        return None
    snap = await snapshot(q, now, policy)
    hit = limit_hit(candidate(job, snap), snap)
    if hit is not None:
        return _limit_wait(hit)
    if not policy.fair_share:
        return None
    place = position_in(Ranked.of(snap, await q.all_queued(MAX_RANKED)), job)
    if not place.ahead_by_share:
        return None
    return Wait(
        WaitCode.BEHIND_FAIR_SHARE,
        {"position": place.position, "ahead_by_share": place.ahead_by_share},
    )
