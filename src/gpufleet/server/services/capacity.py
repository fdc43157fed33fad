"""What the pools do now and why, and what they cost (#36; docs/capacity.md): the Capacity
page, "why is my job waiting?" naming a pool, and the costs of the queue's stats, the Teams
page and a job's page.

The decision is `domain/capacity.py`'s, made here from the store as the reconcile loop makes
it (the leader's idle times aside: a worker's retiring is the loop's to say); the costs are
`domain/pool_costs.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain.advice import POLICY_WAITS
from gpufleet.domain.capacity import FleetWorker, Plan, WaitingJob, decide
from gpufleet.domain.jobspec import gang_shape
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.matching import Wait, WaitCode
from gpufleet.domain.pool_costs import NO_COST, Costs, PoolCost, costs
from gpufleet.domain.pool_reasons import PoolReason
from gpufleet.domain.pools import LIVE_LAUNCH, Launch, Pool
from gpufleet.domain.records import Job, Worker
from gpufleet.domain.states import JobStatus
from gpufleet.server.context import Context
from gpufleet.server.services.standing import candidate
from gpufleet.server.services.waiting import ranked_queue, waiting_fields
from gpufleet.store import Queries

ENDED_READ = 20  # a pool's newest launches the decision reads: its failures in a row
FAILURES_SHOWN = 5  # a pool's newest failed launches its card shows, with their stderr
_NOT_A_POOLS = frozenset({WaitCode.ABOUT_TO_BE_OFFERED, WaitCode.DEPENDENCY, *POLICY_WAITS})


@dataclass(frozen=True, slots=True)
class Decision:
    """The pools' decision now, and what it was made from."""

    plan: Plan
    launches: dict[str, Launch]  # by id: every live one, and each pool's newest
    workers: list[Worker]


async def waiting_jobs(q: Queries, now: datetime) -> list[WaitingJob]:
    """The queued jobs, in queue order, that the policy would start now if a worker took
    them (a limit, an approval or a sweep's max_parallel is not helped by a new machine)."""
    ranked = await ranked_queue(q, now)
    room = await _sweeps_room(q, ranked.order)
    out = []
    for j in ranked.order:
        if limit_hit(candidate(j, ranked.snap), ranked.snap) is not None:
            continue
        if j.sweep_id in room:  # its sweep's max_parallel: only those it may start now
            if room[j.sweep_id] <= 0:
                continue
            room[j.sweep_id] -= 1
        out.append(WaitingJob(j.id, j.requirement(), gang_shape(j.gpu_count, j.config)))
    return out


async def _sweeps_room(q: Queries, queued: Sequence[Job]) -> dict[str, int]:
    """The jobs each sweep with a `max_parallel` may start now, by sweep id."""
    room = {}
    for sweep_id in {j.sweep_id for j in queued if j.sweep_id}:
        sweep = await q.get_sweep(sweep_id)
        if sweep is not None and sweep.max_parallel is not None:
            room[sweep_id] = sweep.max_parallel - await q.sweep_placed(sweep_id)
    return room


def pool_of(launches: dict[str, Launch]) -> dict[str | None, str]:
    """Worker id → the pool that launched it, for the live launches."""
    return {x.worker_id: x.pool_id for x in launches.values() if x.state in LIVE_LAUNCH}


async def decision(
    q: Queries,
    pools: Sequence[Pool],
    now: datetime,
    idle: Callable[[Sequence[Worker]], dict[str, datetime]] | None = None,
) -> Decision:
    """`decide` on the store's state; `idle`: since when each of these workers is idle (the
    leader's reconcile loop counts it; without it, no idle worker is retired for its idle
    time)."""
    launches: dict[str, Launch] = {x.id: x for x in await q.live_launches()}
    for pool in pools:
        launches |= {x.id: x for x in await q.recent_launches(pool.id, ENDED_READ)}
    workers = await q.list_workers()
    waiting = await waiting_jobs(q, now)
    of = pool_of(launches)
    since = idle(workers) if idle is not None else {}
    fleet_now = [FleetWorker(w.capacity(), of.get(w.id), since.get(w.id)) for w in workers]
    plan = decide(pools, waiting, fleet_now, list(launches.values()), now)
    return Decision(plan, launches, workers)


# ---- why a job waits ---------------------------------------------------------------------------


async def pool_wait(
    q: Queries, job: Job, waiting: dict[str, Any] | None, now: datetime
) -> dict[str, Any] | None:
    """The job's `waiting`, naming the pool that launches for it, or why that pool cannot
    yet, when no worker up takes it and the policy holds it for nothing."""
    if waiting is None or job.status is not JobStatus.QUEUED:
        return waiting
    if WaitCode(waiting["code"]) in _NOT_A_POOLS:
        return waiting
    pools = await q.list_pools()
    if not pools:
        return waiting
    reason = (await decision(q, pools, now)).plan.waits.get(job.id)
    if reason is None:
        return waiting
    said = {"pool": reason.params["pool"], "pool_code": reason.code.value, "reason": str(reason)}
    return {**waiting_fields(Wait(WaitCode.POOL, said)), "workers": waiting["workers"]}


# ---- costs ------------------------------------------------------------------------------------


async def all_costs(q: Queries, now: datetime, pools: Sequence[Pool] | None = None) -> Costs:
    """Every pool's cost, and its jobs', users' and teams' shares."""
    pools = await q.list_pools() if pools is None else pools
    if not pools:
        return Costs({})
    return costs(pools, await q.costed_launches(), await q.pool_runs(), now)


async def job_cost(q: Queries, job: Job, now: datetime) -> float | None:
    """What the job cost on pool workers to date; None when it never ran on one."""
    runs = await q.pool_runs(job.id)
    if not runs:
        return None
    workers = {r.worker_id for r in runs}
    launches = [x for x in await q.costed_launches() if x.worker_id in workers]
    found = costs(await q.list_pools(), launches, runs, now)
    return found.jobs.get(job.id, 0.0)


@dataclass(frozen=True, slots=True)
class CostSummary:
    per_hour: float
    to_date: float
    by_pool: dict[str, PoolCost]  # by pool name
    by_team: dict[str, float]  # by team name
    by_user: dict[str, float]  # by user name


async def cost_summary(q: Queries, now: datetime) -> CostSummary:
    """The pools' costs, and the teams' and users' shares, by name."""
    pools = await q.list_pools()
    found = await all_costs(q, now, pools)
    teams = {t.id: t.name for t in await q.list_teams()}
    users = {u.id: u.name for u in await q.list_users()}
    return CostSummary(
        per_hour=found.per_hour,
        to_date=found.to_date,
        by_pool={p.name: found.pools.get(p.id, NO_COST) for p in pools},
        by_team={teams.get(k, k): v for k, v in found.teams.items()},
        by_user={users.get(k, k): v for k, v in found.users.items()},
    )


# ---- the Capacity page ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolStatus:
    pool: Pool
    reason: PoolReason  # what it does now, and why
    launching: int  # workers the decision launches now
    jobs: tuple[str, ...]  # waiting jobs it is the pool for
    live: tuple[Launch, ...]  # launching, registered or terminating, oldest first
    failures: tuple[Launch, ...]  # its newest failed launches
    cost: PoolCost


@dataclass(frozen=True, slots=True)
class CapacityView:
    pools: list[PoolStatus]
    summary: CostSummary


async def capacity(ctx: Context) -> CapacityView:
    now = ctx.clock()
    async with ctx.store.read() as q:
        pools = await q.list_pools()
        made = await decision(q, pools, now)
        summary = await cost_summary(q, now)
    launches = sorted(made.launches.values(), key=lambda x: (x.created_at, x.id))
    shown = []
    for pool in pools:
        mine = [x for x in launches if x.pool_id == pool.id]
        plan = made.plan.pools[pool.name]
        shown.append(
            PoolStatus(
                pool=pool,
                reason=plan.reason,
                launching=plan.launch,
                jobs=plan.jobs,
                live=tuple(x for x in mine if x.state in LIVE_LAUNCH),
                failures=tuple(x for x in reversed(mine) if x.failed)[:FAILURES_SHOWN],
                cost=summary.by_pool[pool.name],
            )
        )
    return CapacityView(shown, summary)
