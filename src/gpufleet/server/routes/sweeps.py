"""Sweeps (`queue.read` to watch, `queue.submit` to cancel and re-run as one): made by a
submit with `sweep` (routes/queue.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Response

from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.domain.sweeps import params_of
from gpufleet.errors import InvalidInput
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.jobs import SubmitIn
from gpufleet.server.schemas.sweeps import (
    SweepActed,
    SweepCurve,
    SweepCurvesOut,
    SweepList,
    SweepOut,
    SweepResult,
)
from gpufleet.server.services import reruns, sweeps
from gpufleet.server.services.auth import Principal
from gpufleet.server.services.submit import Submission

router = api_router(tags=["sweeps"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Submitter = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]


def spec_of(body: SubmitIn) -> sweeps.SweepSpec | None:
    """The submit's sweep, if it asks for one."""
    if body.sweep is None:
        if body.sweep_samples is not None or body.max_parallel is not None:
            raise InvalidInput(
                "'sweep_samples' and 'max_parallel' go with a 'sweep': send the parameters "
                'to sweep, e.g. "sweep": {"lr": [0.0001, 0.001]}'
            )
        return None
    return sweeps.SweepSpec(body.sweep, body.sweep_samples, body.max_parallel)


async def _out(ctx: Ctx, who: Principal, sweep_id: str, detail: bool = True) -> SweepOut:
    found = await sweeps.view(ctx, sweep_id, who.user, who.permissions)
    return SweepOut.of(found, await sweeps.names(ctx, [found.sweep]), detail=detail)


async def make(
    ctx: Ctx,
    who: Principal,
    client: str | None,
    sub: Submission,
    spec: sweeps.SweepSpec,
    response: Response,
) -> SweepOut:
    made = await sweeps.create(ctx, sub, spec, who.actor, client, user_id=who.user.id)
    if made.idempotent_hit:
        response.status_code = 200
    out = await _out(ctx, who, made.sweep.id, detail=False)
    return out.model_copy(update={"idempotent_hit": made.idempotent_hit})


@router.get("/api/sweeps", response_model=SweepList)
async def list_sweeps(
    ctx: Ctx,
    who: Reader,
    mine: Annotated[bool, Query(description="only the caller's")] = False,
    limit: Annotated[int, Query(ge=1, le=sweeps.MAX_LISTED)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> SweepList:
    found, total = await sweeps.listed(ctx, who.user, who.permissions, limit, offset, mine)
    names = await sweeps.names(ctx, [v.sweep for v in found])
    return SweepList(
        sweeps=[SweepOut.of(v, names) for v in found], total=total, limit=limit, offset=offset
    )


@router.get("/api/sweeps/{sweep_id}", response_model=SweepOut)
async def get_sweep(ctx: Ctx, who: Reader, sweep_id: str) -> SweepOut:
    """The sweep, each point's latest job with its parameters and final metrics."""
    return await _out(ctx, who, sweep_id)


@router.get("/api/sweeps/{sweep_id}/progress", response_model=SweepCurvesOut)
async def sweep_progress(
    ctx: Ctx,
    who: Reader,
    sweep_id: str,
    metric: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> SweepCurvesOut:
    """One metric's curve of each of its jobs (default: loss, else the first by name)."""
    found = await sweeps.curves(ctx, sweep_id, metric)
    return SweepCurvesOut(
        sweep_id=sweep_id,
        metric=found.metric,
        metrics=found.metrics,
        curves=[
            SweepCurve(
                job_id=j.id,
                params=params_of(j.config),
                status=j.status.value,
                points=found.series.get(j.id, []),
            )
            for j in found.jobs
        ],
    )


def _acted(out: SweepOut, outcomes: list[reruns.Outcome]) -> SweepActed:
    results = [
        SweepResult(
            job_id=o.job_id,
            ok=o.job is not None,
            new_job_id=o.job.id if o.job and o.job.id != o.job_id else None,
            error=o.error,
        )
        for o in outcomes
    ]
    done = sum(r.ok for r in results)
    return SweepActed(sweep=out, results=results, done=done, failed=len(results) - done)


@router.post("/api/sweeps/{sweep_id}/cancel", response_model=SweepActed)
async def cancel_sweep(ctx: Ctx, who: Submitter, client: Client, sweep_id: str) -> SweepActed:
    """Cancel every job of the sweep not ended yet."""
    outcomes = await sweeps.cancel(ctx, sweep_id, who.actor, client, by=who.user)
    return _acted(await _out(ctx, who, sweep_id), outcomes)


@router.post("/api/sweeps/{sweep_id}/rerun", response_model=SweepActed)
async def rerun_sweep(ctx: Ctx, who: Submitter, client: Client, sweep_id: str) -> SweepActed:
    """Re-run its failed and cancelled jobs, in the sweep."""
    outcomes = await sweeps.rerun(ctx, sweep_id, who.actor, client, by=who.user)
    return _acted(await _out(ctx, who, sweep_id), outcomes)
