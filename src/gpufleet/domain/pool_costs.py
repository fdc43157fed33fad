"""What the pools cost (#36), pure: worker-hours at each pool's `price_per_hour`, and who ran
on them.

A launch costs from its worker's registration to its end (now, while it is up), at its
pool's price now. A job's attempt on a pool's worker is the job's share of that time, from
its start (`running`) to its end, and so its user's and its team's. A pool's time no job ran
is its idle cost: what it cost to date less what its jobs cost. A pool's cost an hour is its
instances up or on their way (`LIVE_LAUNCH`, as `max_cost_per_hour` counts them) at its price.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.domain.pools import LIVE_LAUNCH, Launch, Pool

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Run:
    """A job's time on one worker: an attempt's, or one node's of a multi-node attempt."""

    job_id: str
    user_id: str | None
    team_id: str | None
    worker_id: str
    started_at: datetime
    ended_at: datetime | None  # None: it runs still


@dataclass(frozen=True, slots=True)
class PoolCost:
    per_hour: float  # its live instances at its price: what max_cost_per_hour caps
    to_date: float  # its launches' worker-hours at its price
    worker_hours: float
    job_hours: float  # of those, the hours its workers ran jobs

    @property
    def idle(self) -> float:
        """What its workers cost while they ran no job."""
        return max(0.0, self.to_date - self.job_cost)

    @property
    def job_cost(self) -> float:
        return self.to_date * (self.job_hours / self.worker_hours) if self.worker_hours else 0.0


NO_COST = PoolCost(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Costs:
    pools: Mapping[str, PoolCost]  # by pool id
    jobs: Mapping[str, float] = field(default_factory=dict)  # by job id
    users: Mapping[str, float] = field(default_factory=dict)  # by user id
    teams: Mapping[str, float] = field(default_factory=dict)  # by team id

    @property
    def per_hour(self) -> float:
        return sum(c.per_hour for c in self.pools.values())

    @property
    def to_date(self) -> float:
        return sum(c.to_date for c in self.pools.values())


def hours(start: datetime, end: datetime | None, now: datetime) -> float:
    """Hours from `start` to `end` (to `now` while it has none), never below zero."""
    return max(0.0, ((end or now) - start).total_seconds()) / HOUR_S


def _overlap(run: Run, launch: Launch, now: datetime) -> float:
    """The run's hours within its worker's launch (from registration to its end)."""
    if launch.registered_at is None:
        return 0.0
    start = max(run.started_at, launch.registered_at)
    ends = [t for t in (run.ended_at, launch.ended_at) if t is not None]
    return hours(start, min(ends) if ends else None, now)


def costs(
    pools: Sequence[Pool], launches: Sequence[Launch], runs: Sequence[Run], now: datetime
) -> Costs:
    """Every pool's cost an hour and to date, and its jobs', users' and teams' shares of it.
    `launches`: those of `pools` whose worker registered, and the live ones; `runs`: the
    jobs' time on those launches' workers (others are not a pool's and cost nothing here)."""
    price = {p.id: p.price_per_hour for p in pools}
    of_worker = {x.worker_id: x for x in launches if x.worker_id is not None and x.pool_id in price}
    worker_h: dict[str, float] = defaultdict(float)
    job_h: dict[str, float] = defaultdict(float)
    live: dict[str, int] = defaultdict(int)
    for x in of_worker.values():
        if x.registered_at is not None:
            worker_h[x.pool_id] += hours(x.registered_at, x.ended_at, now)
        live[x.pool_id] += x.state in LIVE_LAUNCH
    jobs: dict[str, float] = defaultdict(float)
    users: dict[str, float] = defaultdict(float)
    teams: dict[str, float] = defaultdict(float)
    for run in runs:
        launch = of_worker.get(run.worker_id)
        if launch is None:
            continue
        spent = _overlap(run, launch, now)
        job_h[launch.pool_id] += spent
        amount = spent * price[launch.pool_id]
        jobs[run.job_id] += amount
        if run.user_id is not None:
            users[run.user_id] += amount
        if run.team_id is not None:
            teams[run.team_id] += amount
    by_pool = {
        p.id: PoolCost(
            per_hour=live[p.id] * p.price_per_hour,
            to_date=worker_h[p.id] * p.price_per_hour,
            worker_hours=worker_h[p.id],
            job_hours=min(job_h[p.id], worker_h[p.id]),
        )
        for p in pools
    }
    return Costs(by_pool, dict(jobs), dict(users), dict(teams))
