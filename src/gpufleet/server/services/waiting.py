"""Why a queued job waits (docs/scheduling.md): what the fleet lacks (`domain.matching`), what
the policy holds it back for (an approval, a limit, fair share), and its place in the queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpufleet.domain import gang
from gpufleet.domain.advice import say_wait_everywhere
from gpufleet.domain.approvals import approval_needed
from gpufleet.domain.fair_share import rank_key
from gpufleet.domain.jobspec import gang_shape
from gpufleet.domain.limits import LimitHit, limit_hit
from gpufleet.domain.matching import (
    Reason,
    Wait,
    WaitCode,
    Why,
    fits,
    reasons_not_running,
    why_waiting,
)
from gpufleet.domain.policy import Snapshot
from gpufleet.domain.records import Job, Worker
from gpufleet.domain.states import JobStatus, Target, WorkerStatus
from gpufleet.domain.sweeps import has_room
from gpufleet.server.context import Context
from gpufleet.server.services import dependencies
from gpufleet.server.services.standing import candidate, is_plain, snapshot
from gpufleet.store import Queries

MAX_RANKED = 100_000  # queued jobs a position is counted among

# The fleet's waits under which the policy's reason is the one to give.
_FLEET_COULD = frozenset({WaitCode.ABOUT_TO_BE_OFFERED.value, WaitCode.ALL_UNAVAILABLE.value})
UNMATCHED_SHOWN = 20  # queued jobs, from the head of the queue, the workers list looks at
ANY_GPU_COUNT = 2**31 - 1  # the most a job's gpu_count column holds (32 bits)


async def unmatched_jobs(ctx: Context, workers: list[Worker]) -> list[tuple[Job, Wait]]:
    """Queued jobs, from the head of the queue, that no registered worker can run, each
    with its `waiting` summary: what the fleet lacks, shown beside the workers list in the
    same words as on each job. `workers`: the whole fleet."""
    async with ctx.store.read() as q:
        head = await q.queued_jobs(
            max_gpus=ANY_GPU_COUNT, targets=list(Target), after=None, limit=UNMATCHED_SHOWN
        )
    caps = [w.capacity() for w in workers]
    registered = [c for c in caps if c.gpu_count is not None]
    return [
        (job, why_waiting(job.requirement(), caps))
        for job in head
        if not any(fits(job.requirement(), c) for c in registered)
    ]


def explain_wait(job: Job, workers: list[Worker]) -> dict[str, Any]:
    """Why a queued job waits: a summary, then each worker's reasons (what the CLI's `jobs
    show` and the UI's job page print)."""
    req = job.requirement()
    rows = []
    caps = []
    for w in workers:
        cap = w.capacity()
        reasons = reasons_not_running(req, cap)
        if w.held_for is not None and w.held_for != job.id:  # kept for a gang: not for it
            reasons.append(Reason(Why.HELD, {"note": w.held_note, "job_id": w.held_for}))
            cap = replace(cap, status=WorkerStatus.BUSY)  # what it can run now: nothing else
        caps.append(cap)
        rows.append(
            {
                "worker_id": w.id,
                "name": w.name,
                "status": w.status.value,
                "reasons": [str(r) for r in reasons]
                or ["matches: the job is about to be offered to it"],
                "reason_codes": [r.code.value for r in reasons],
            }
        )
    if job.nodes > 1:  # a gang: how many may be its nodes now, and how many it holds
        held = sum(w.held_for == job.id for w in workers)
        shape = gang_shape(job.gpu_count, job.config)
        return {**waiting_fields(gang.waiting(shape, req, caps, held)), "workers": rows}
    return {**waiting_fields(why_waiting(req, caps)), "workers": rows}


def waiting_fields(wait: Wait) -> dict[str, Any]:
    """A wait as the API answers it: `summary` in the API's words, `summaries` for the UI and
    the CLI in theirs, and the code and parameters they come from."""
    summaries = say_wait_everywhere(wait)
    return {
        "summary": summaries["api"],
        "summaries": summaries,
        "code": wait.code.value,
        "params": dict(wait.params),
    }


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


async def _held_by(q: Queries, job: Job) -> str | None:
    """The approval rule that holds the job, as the policy reads now (None: none does, as
    the policy changed since its submit)."""
    user = await q.get_user(job.user_id) if job.user_id else None
    if user is None:
        return None
    policy, _own = await q.dispatch_policy()
    return approval_needed(policy, user.level, job.total_gpus)


async def policy_wait(q: Queries, job: Job, now: datetime) -> Wait | None:
    """What the policy holds the job back for, if anything: an approval, a limit, or the
    jobs of teams further below their share ranked before it."""
    if job.status is JobStatus.PENDING_APPROVAL:
        return Wait(WaitCode.AWAITING_APPROVAL, {"job": job.id, "rule": await _held_by(q, job)})
    if job.status is not JobStatus.QUEUED:
        return None
    if (full := await sweep_wait(q, job)) is not None:
        return full
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


async def sweep_wait(q: Queries, job: Job) -> Wait | None:
    """Its sweep's `max_parallel` jobs on workers already (domain/sweeps.py `has_room`)."""
    sweep = await q.get_sweep(job.sweep_id) if job.sweep_id else None
    if sweep is None or sweep.max_parallel is None:
        return None
    running = await q.sweep_placed(sweep.id)
    if has_room(running, sweep.max_parallel):
        return None
    said = {"sweep": sweep.id, "max_parallel": sweep.max_parallel, "running": running}
    return Wait(WaitCode.SWEEP_AT_MAX_PARALLEL, said)


def _fleet_could(waiting: dict[str, Any]) -> bool:
    """Whether the workers could run the job now (a gang: enough of them match now)."""
    if waiting["code"] == WaitCode.WAITING_FOR_NODES.value:
        return bool(waiting["params"]["matching"] >= waiting["params"]["nodes"])
    return waiting["code"] in _FLEET_COULD


async def job_waiting(q: Queries, job: Job, now: datetime) -> dict[str, Any] | None:
    """What a job's page says it waits for: the fleet's reasons, or the policy's where the
    workers could run it."""
    if job.status is JobStatus.QUEUED and (held := await dependencies.wait_of(q, job)):
        return {**waiting_fields(held), "workers": []}  # no worker is asked before it ends
    waiting = None
    if job.status is JobStatus.QUEUED:
        waiting = explain_wait(job, await q.list_workers())
    policy_held = await policy_wait(q, job, now)
    if policy_held is not None and (waiting is None or _fleet_could(waiting)):
        # Workers could run it: the policy is what it waits for.
        shown = waiting["workers"] if waiting else []
        waiting = {**waiting_fields(policy_held), "workers": shown}
    return waiting
