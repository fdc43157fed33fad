"""The pools as every reader sees them (#36): what each does now and why, its launches and
failures, and what the pools cost (docs/capacity.md). A `command` provider is shown by its
programs only, as the audit log shows it: its arguments may carry a cloud's credentials."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel

from gpufleet.domain import pools as rules
from gpufleet.domain.states import WorkerType
from gpufleet.server.schemas.base import Record
from gpufleet.server.schemas.pools import LaunchOut
from gpufleet.server.services.capacity import CapacityView, CostSummary, PoolStatus


class PoolCostOut(Record):
    per_hour: float  # its instances up or on their way, at its price
    to_date: float  # its workers' hours from registration to end, at its price
    worker_hours: float
    job_hours: float  # of those, the hours its workers ran jobs
    idle: float  # what its workers cost while they ran no job


class CostsOut(BaseModel):
    per_hour: float
    to_date: float
    by_pool: dict[str, PoolCostOut]  # pool name →
    by_team: dict[str, float]  # team name → its jobs' share to date
    by_user: dict[str, float]  # user name → their jobs' share to date

    @classmethod
    def of(cls, s: CostSummary) -> Self:
        return cls(
            per_hour=s.per_hour,
            to_date=s.to_date,
            by_pool={name: PoolCostOut.of(c) for name, c in s.by_pool.items()},
            by_team=s.by_team,
            by_user=s.by_user,
        )


class ReasonOut(BaseModel):
    code: str  # domain/pool_reasons.py PoolWhy
    text: str
    params: dict[str, Any]


class PoolStatusOut(BaseModel):
    name: str
    provider: dict[str, Any]  # its type and settings; a command's programs only
    labels: dict[str, str]
    gpu_count: int
    gpu_name: str | None
    worker_type: WorkerType
    min_workers: int
    max_workers: int
    price_per_hour: float
    max_cost_per_hour: float | None
    enabled: bool
    reason: ReasonOut  # what it does now, and why
    launching_now: int  # workers the decision launches on the next pass
    jobs: list[str]  # waiting jobs it is the pool for
    live: list[LaunchOut]  # launching, registered or terminating, oldest first
    failures: list[LaunchOut]  # its newest failed launches, with the provider's stderr
    cost: PoolCostOut
    updated_at: datetime

    @classmethod
    def of(cls, s: PoolStatus) -> Self:
        p = s.pool
        return cls(
            name=p.name,
            provider=rules.audited({"provider": p.provider.as_json()})["provider"],
            labels=dict(p.labels),
            gpu_count=p.gpu_count,
            gpu_name=p.gpu_name,
            worker_type=p.worker_type,
            min_workers=p.min_workers,
            max_workers=p.max_workers,
            price_per_hour=p.price_per_hour,
            max_cost_per_hour=p.max_cost_per_hour,
            enabled=p.enabled,
            reason=ReasonOut(
                code=s.reason.code.value, text=str(s.reason), params=dict(s.reason.params)
            ),
            launching_now=s.launching,
            jobs=list(s.jobs),
            live=[LaunchOut.of(x) for x in s.live],
            failures=[LaunchOut.of(x) for x in s.failures],
            cost=PoolCostOut.of(s.cost),
            updated_at=p.updated_at,
        )


class CapacityOut(BaseModel):
    pools: list[PoolStatusOut]
    cost: CostsOut

    @classmethod
    def of(cls, v: CapacityView) -> Self:
        return cls(pools=[PoolStatusOut.of(s) for s in v.pools], cost=CostsOut.of(v.summary))
