"""Sweeps (docs/jobs.md, Sweeps): the submit body's sweep fields, a sweep and its jobs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from gpufleet.domain.history import sample_of
from gpufleet.domain.records import Job
from gpufleet.domain.sweeps import MAX_PARALLEL, MAX_POINTS, params_of
from gpufleet.server.schemas.base import Strict
from gpufleet.server.services.sweeps import SweepView

_NO_NAMES: Mapping[str, str] = {}


class SweepFields(Strict):
    """What makes a submit a sweep: one job a point of `sweep`'s grid."""

    sweep: dict[str, Any] | None = Field(
        None,
        description="parameter name -> its values (strings, numbers, booleans): one job a "
        'point of their grid, e.g. {"lr": [0.0001, 0.001], "batch": [16, 32]}; `{lr}` in the '
        f"command, env values and config is replaced by the point's value (at most {MAX_POINTS} "
        "points)",
    )
    sweep_samples: int | None = Field(
        None, ge=1, le=MAX_POINTS, description="run this many points of the grid, at random"
    )
    max_parallel: int | None = Field(
        None, ge=1, le=MAX_PARALLEL, description="the sweep's jobs on workers at once, at most"
    )


class SweepJobOut(BaseModel):
    job_id: str
    status: str
    params: dict[str, Any]  # its point
    metrics: dict[str, float]  # the numeric values of its latest progress
    step: int | None
    total: int | None
    attempts: int
    error: str | None
    rerun_of: str | None
    created_at: datetime
    ended_at: datetime | None

    @classmethod
    def of(cls, j: Job) -> Self:
        sample = sample_of(j.progress) if j.progress else None
        return cls(
            job_id=j.id,
            status=j.status.value,
            params=params_of(j.config),
            metrics=sample.values if sample else {},
            step=sample.step if sample else None,
            total=sample.total if sample else None,
            attempts=j.attempts,
            error=j.error,
            rerun_of=j.rerun_of,
            created_at=j.created_at,
            ended_at=j.ended_at,
        )


class SweepOut(BaseModel):
    id: str
    sweep_id: str
    status: str  # running, queued; once all ended: completed, failed or cancelled
    params: dict[str, list[Any]]  # name -> its values
    samples: int | None  # drawn at random: how many; null: the whole grid
    max_parallel: int | None
    size: int  # the points (jobs) it made
    counts: dict[str, int]  # its jobs (each point's latest) by status
    user: str | None
    user_id: str | None
    team: str | None
    team_id: str | None
    submitted_by: str | None
    created_at: datetime
    actions: list[str]  # what the caller may do to it now: cancel, rerun
    # Each point's latest job (a re-run's, once it has one): in GET /api/sweeps/{id} only.
    jobs: list[SweepJobOut] | None = None
    metrics: list[str] | None = None  # the numeric keys its jobs' progress reported
    # A submit's answer: the sweep an earlier submit of its idempotency key made (200).
    idempotent_hit: bool = False

    @classmethod
    def of(cls, v: SweepView, names: Mapping[str, str] = _NO_NAMES, detail: bool = False) -> Self:
        s = v.sweep
        jobs = [SweepJobOut.of(j) for j in v.jobs] if detail else None
        metrics = sorted({k for j in jobs for k in j.metrics}) if jobs is not None else None
        return cls(
            id=s.id,
            sweep_id=s.id,
            status=v.status,
            params=s.params,
            samples=s.samples,
            max_parallel=s.max_parallel,
            size=s.size,
            counts=v.counts,
            user=names.get(s.user_id, s.user_id) if s.user_id else None,
            user_id=s.user_id,
            team=names.get(s.team_id, s.team_id) if s.team_id else None,
            team_id=s.team_id,
            submitted_by=s.submitted_by,
            created_at=s.created_at,
            actions=v.actions,
            jobs=jobs,
            metrics=metrics,
        )


class SweepList(BaseModel):
    sweeps: list[SweepOut]
    total: int
    limit: int
    offset: int


class SweepCurve(BaseModel):
    job_id: str
    params: dict[str, Any]
    status: str
    points: list[tuple[int, float, int]] = Field(description="[step, value, attempt number]")


class SweepCurvesOut(BaseModel):
    sweep_id: str
    metric: str | None  # the metric drawn; null: its jobs reported none
    metrics: list[str]  # every metric its jobs' progress history holds
    curves: list[SweepCurve]


class SweepResult(BaseModel):
    job_id: str
    ok: bool
    new_job_id: str | None  # a re-run's new job
    error: str | None  # why not, in words


class SweepActed(BaseModel):
    """A cancel or re-run of the sweep: each job's outcome."""

    sweep: SweepOut
    results: list[SweepResult]
    done: int
    failed: int
