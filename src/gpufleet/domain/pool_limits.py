"""What a pool may launch now (#36): its room under `max_workers` and `max_cost_per_hour`,
and the wait after failed launches (`backoff_s`). Part of `domain/capacity.py`'s decision."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.domain.pool_reasons import PoolReason, PoolWhy
from gpufleet.domain.pool_strays import interrupted
from gpufleet.domain.pools import LIVE_LAUNCH, Launch, LaunchState, Pool

FIRST_BACKOFF_S = 30.0
MAX_BACKOFF_S = 1800.0
EXCERPT = 200  # characters of the last failure's stderr a reason quotes
# A launch's instance that is not on its way out: what `min_workers` counts.
_STANDING = frozenset({LaunchState.LAUNCHING, LaunchState.REGISTERED})


def backoff_s(failures: int) -> float:
    """How long a pool waits after `failures` launches failed in a row: 30 s, doubling
    each time, at most 30 minutes."""
    if failures <= 0:
        return 0.0
    return min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** min(failures - 1, 32))


@dataclass(eq=False)
class Room:
    """One pool during one decision."""

    pool: Pool
    live: int  # LIVE_LAUNCH instances: what max and cost count
    standing: int  # launching or registered: what min counts
    backoff: PoolReason | None
    last_launch: datetime | None
    planned: int = 0
    jobs: list[str] = field(default_factory=list)
    blocked: PoolReason | None = None

    @property
    def preference(self) -> tuple[float, int, str]:
        return (self.pool.price_per_hour, self.pool.gpu_count, self.pool.name)

    def room(self) -> tuple[int, bool]:
        """How many more it may launch now, and whether cost (not max) is what limits it."""
        by_max = self.pool.max_workers - self.live - self.planned
        cap, price = self.pool.max_cost_per_hour, self.pool.price_per_hour
        if cap is None or price <= 0:
            return by_max, False
        by_cost = math.floor(cap / price + 1e-9) - self.live - self.planned
        return min(by_max, by_cost), by_cost < by_max

    def allows(self, needed: int) -> bool:
        """May it launch `needed` workers now? (`refusal` says why not.)"""
        pool = self.pool
        return (
            pool.enabled
            and self.backoff is None
            and needed <= pool.max_workers
            and self.room()[0] >= needed
        )

    def refusal(self, needed: int, job_id: str | None) -> PoolReason | None:
        """Why it cannot launch `needed` workers now (all of them: a gang's are one set)."""
        pool = self.pool
        said: dict[str, Any] = {"pool": pool.name, "max": pool.max_workers}
        if not pool.enabled:
            return PoolReason(PoolWhy.DISABLED, said)
        if needed > pool.max_workers:
            return PoolReason(PoolWhy.GANG_TOO_BIG, said | {"job_id": job_id, "needed": needed})
        if self.backoff is not None:
            return self.backoff
        room, by_cost = self.room()
        if room >= needed:
            return None
        if by_cost:
            said |= {"max_cost": pool.max_cost_per_hour, "price": pool.price_per_hour}
            count = self.live + self.planned
            return PoolReason(PoolWhy.AT_COST, said | {"count": count, "needed": needed})
        said |= {"room": max(0, room), "job_id": job_id, "needed": needed}
        return PoolReason(PoolWhy.AT_MAX, said)


def room_of(pool: Pool, launches: Sequence[Launch], now: datetime) -> Room:
    # Tuples, not the sets: an Enum member hashes in Python code, slowly.
    live_states, standing_states = tuple(LIVE_LAUNCH), tuple(_STANDING)
    live = sum(1 for launch in launches if launch.state in live_states)
    standing = sum(1 for launch in launches if launch.state in standing_states)
    newest = sorted(launches, key=lambda launch: (launch.created_at, launch.id), reverse=True)
    failures, last = 0, None
    for launch in newest:
        if launch.registered_at is not None:
            break
        if launch.failed and not interrupted(launch):
            failures += 1
            last = last or launch
    backoff = None
    if last is not None:
        until = (last.ended_at or last.created_at).timestamp() + backoff_s(failures)
        if now.timestamp() < until:
            said = (last.stderr or "").strip().splitlines() or [last.error or "no reason given"]
            params = {"pool": pool.name, "failures": failures, "excerpt": said[-1][-EXCERPT:]}
            next_in = until - now.timestamp()
            backoff = PoolReason(PoolWhy.BACKING_OFF, params | {"next_in_s": next_in})
    last_launch = newest[0].created_at if newest else None
    return Room(pool, live, standing, backoff, last_launch)
