"""The queue policy and the queue's compatible endpoints (SimpleTuner's Job Queue, plus ours)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from gpufleet.domain.levels import Level
from gpufleet.server.schemas.base import Strict
from gpufleet.server.schemas.capacity import CostsOut
from gpufleet.server.schemas.jobs import JobOut

Count = Annotated[int | None, Field(ge=0, le=1_000_000, strict=True)]
Switch = Annotated[bool | None, Field(strict=True)]


class PolicyIn(Strict):
    """Any of the policy's fields; a limit of null means no limit."""

    max_jobs: Count = None
    max_gpus: Count = None
    team_max_jobs: Count = None
    team_max_gpus: Count = None
    user_max_jobs: Count = None
    user_max_gpus: Count = None
    user_max_queued: Count = None
    fair_share: Switch = None
    half_life_s: float | None = Field(None, ge=60, le=10 * 365 * 86400, allow_inf_nan=False)
    preemption: Switch = None
    min_runtime_s: float | None = Field(None, ge=0, le=365 * 86400, allow_inf_nan=False)
    preempt_grace_s: float | None = Field(None, ge=0, le=86400, allow_inf_nan=False)
    approve_gpus_over: Count = None
    approve_levels: list[Level] | None = Field(None, max_length=4)

    def changes(self) -> dict[str, Any]:
        """The fields sent; a limit sent as null clears it, a switch sent as null is left."""
        sent = self.model_dump(exclude_unset=True)
        keep_null = {n for n in sent if n.startswith(("max_", "team_max", "user_max"))}
        keep_null.add("approve_gpus_over")
        return {k: v for k, v in sent.items() if v is not None or k in keep_null}


class ConcurrencyIn(PolicyIn):
    """SimpleTuner's names (max_concurrent → max_jobs, …), or ours."""

    max_concurrent: Count = None
    user_max_concurrent: Count = None
    team_max_concurrent: Count = None
    enable_fair_share: Switch = None


class PolicyOut(BaseModel):
    max_jobs: int | None
    max_gpus: int | None
    team_max_jobs: int | None
    team_max_gpus: int | None
    user_max_jobs: int | None
    user_max_gpus: int | None
    user_max_queued: int | None
    fair_share: bool
    half_life_s: float
    preemption: bool
    min_runtime_s: float
    preempt_grace_s: float
    approve_gpus_over: int | None
    approve_levels: list[str]
    updated_at: datetime | None = None
    updated_by: str | None = None


class ConcurrencyOut(PolicyOut):
    max_concurrent: int | None
    user_max_concurrent: int | None
    team_max_concurrent: int | None
    enable_fair_share: bool


class StatsOut(BaseModel):
    queue_depth: int  # jobs queued
    running: int  # jobs offered or running
    max_concurrent: int | None
    user_max_concurrent: int | None
    team_max_concurrent: int | None
    max_gpus: int | None
    team_max_gpus: int | None
    user_max_gpus: int | None
    user_max_queued: int | None
    fair_share: bool
    avg_wait_seconds: float | None  # queued to first offer, over the last day
    by_status: dict[str, int]  # gpufleet's statuses, and SimpleTuner's names for them
    by_user: dict[str, int]  # user name → jobs waiting or running
    cost: CostsOut  # the pools' cost an hour and to date, by pool, team and user


class MeOut(BaseModel):
    pending_count: int
    running_count: int
    blocked_count: int  # waiting for approval
    best_position: int | None
    pending_jobs: list[JobOut]
    running_jobs: list[JobOut]
    blocked_jobs: list[JobOut]


class PositionOut(BaseModel):
    job_id: str
    status: str
    position: int | None  # 1: offered next; null: not queued
    ahead: int  # queued jobs ranked before it
    ahead_by_share: int  # of them, those of teams further below their share


class CleanupOut(BaseModel):
    success: bool
    deleted: int
    days: int


class ProcessOut(BaseModel):
    success: bool
    offered: int
