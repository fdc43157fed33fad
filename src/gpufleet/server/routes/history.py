"""A job's progress history for the charts (`queue.read`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import QUEUE_READ
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.jobs import ProgressHistoryOut, SeriesOut
from gpufleet.server.services import history
from gpufleet.server.services.auth import Principal

router = api_router(tags=["queue"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]


@router.get("/api/queue/{job_id}/progress", response_model=ProgressHistoryOut)
async def job_progress(ctx: Ctx, who: Reader, job_id: str) -> ProgressHistoryOut:
    """The job's metrics over its steps, thinned evenly to at most `capacity` points a
    series, with its step, total, rate and ETA."""
    h = await history.read(ctx, job_id)
    return ProgressHistoryOut(
        job_id=h.job.id,
        status=h.job.status.value,
        step=h.step,
        total=h.total,
        rate=h.pace.rate,
        eta_s=h.pace.eta_s,
        updated_at=h.updated_at,
        capacity=h.capacity,
        series=[SeriesOut(name=name, points=points) for name, points in h.series.items()],
    )
