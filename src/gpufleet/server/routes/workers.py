"""The worker API (`X-Worker-Token`): register, stream, heartbeat, report, disconnect."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import Query, Request
from starlette.responses import StreamingResponse

from gpufleet.domain.records import GpuStat
from gpufleet.server import sse
from gpufleet.server.deps import Client, Ctx, CurrentWorker
from gpufleet.server.hub import worker_topic
from gpufleet.server.jsonbody import api_router
from gpufleet.server.schemas import (
    SSE_RESPONSE,
    HeartbeatIn,
    HeartbeatOut,
    LogsIn,
    Ok,
    RegisterIn,
    RegisterOut,
    StatusIn,
    StatusOut,
    WorkerIdIn,
)
from gpufleet.server.services import fleet, reports
from gpufleet.server.services.fleet import Registration
from gpufleet.server.services.reports import StatusReport

router = api_router(prefix="/api/workers", tags=["workers"])
_GPU_STAT_FIELDS = {"index", "utilization_pct", "memory_used_gb", "memory_total_gb"}


def _registration(body: RegisterIn) -> Registration:
    info = body.gpu_info
    persistent = body.persistent
    if persistent is None and body.worker_type is not None:
        persistent = body.worker_type.value == "persistent"
    extra = body.model_dump(
        include={
            "gpus",
            "driver_version",
            "cuda_version",
            "cpu_cores",
            "ram_gb",
            "agent",
            "hostname",
            "features",
        },
        exclude_none=True,
    )
    if info is not None and info.driver:
        extra.setdefault("driver_version", info.driver)
    return Registration(
        name=body.name,
        persistent=persistent,
        gpu_count=body.gpu_count if body.gpu_count is not None else (info.count if info else 0),
        gpu_name=body.gpu_name or (info.name if info else None),
        gpu_vram_gb=body.gpu_vram_gb
        if body.gpu_vram_gb is not None
        else (info.vram_gb if info else None),
        accelerator_type=body.accelerator_type
        or (info.accelerator if info else None)
        or ("cpu" if (body.gpu_count or (info.count if info else 0)) == 0 else None),
        labels=body.labels,
        current_job_id=body.current_job_id,
        current_attempt_id=body.current_attempt_id,
        extra=extra,
    )


@router.post("/register", response_model=RegisterOut)
async def register(
    ctx: Ctx, worker: CurrentWorker, client: Client, body: RegisterIn
) -> RegisterOut:
    answer = await fleet.register(ctx, worker, _registration(body), client)
    w = answer.worker
    return RegisterOut(
        worker_id=w.id,
        name=w.name,
        status=w.status.value,
        labels=w.labels,
        heartbeat_interval=ctx.settings.heartbeat_interval,
        resume_job=answer.resume_job,
        abandon_job=answer.abandon_job,
    )


STREAM_CLOSE_SECONDS = 5.0
T = TypeVar("T")
# A stream's database calls run as tasks of their own: the cancel that ends a stream (its
# client left) must not cut one off midway, which can leave the SQLite driver waiting forever
# on the connection it then closes. They are kept here until done; shutdown waits for them.
_inflight: set[asyncio.Task[Any]] = set()


def _uncut(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    task = asyncio.create_task(coro)
    _inflight.add(task)
    task.add_done_callback(_inflight.discard)
    return task


async def finish_stream_calls() -> None:
    """At shutdown, before the database goes: let the streams' last calls finish."""
    if _inflight:
        await asyncio.wait(set(_inflight), timeout=STREAM_CLOSE_SECONDS)


@router.get("/stream", responses=SSE_RESPONSE)
async def stream(
    ctx: Ctx,
    worker: CurrentWorker,
    request: Request,
    worker_id: Annotated[str | None, Query()] = None,
) -> StreamingResponse:
    fleet.check_self(worker, worker_id)
    owner = f"{ctx.instance_id}:{secrets.token_hex(4)}"
    ctx.hub.close(worker_topic(worker.id))  # one stream per worker: the newest wins
    sub = ctx.hub.subscribe(worker_topic(worker.id))
    try:
        await fleet.stream_opened(ctx, worker, owner)
    except BaseException:
        ctx.hub.unsubscribe(sub)
        raise

    async def events() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        pacing = fleet.OfferPacing.for_worker(ctx, worker)
        last_write = loop.time()
        handed: list[dict[str, Any]] = []
        reread = True  # the first round reads what waits for the worker
        try:
            with sub:
                yield sse.frame({"type": "connected", "worker_id": worker.id}, event="connected")
                while not sub.closed:
                    # An offer handed over by the claim that made it is known at once; every
                    # other change notifies the topic plainly, and the stream reads the
                    # database (so does a quiet stream when an offer is due again).
                    for event in handed:
                        pacing.add(event, loop.time())
                    if reread or pacing.must_read(loop.time()):
                        pending = await asyncio.shield(
                            _uncut(fleet.pending_events(ctx, worker.id, owner))
                        )
                        if pending is None:
                            break  # a newer stream took over, or the worker went offline
                        commands, offers = pending
                        pacing.replace(offers, loop.time())
                        for event in commands:
                            yield sse.frame(event, event=event["type"])
                            last_write = loop.time()
                    for offer in pacing.take_due(loop.time()):
                        yield sse.frame(offer, event="job_submit")
                        last_write = loop.time()
                    # Woken by a change, when an offer is due, or to ping.
                    wake = last_write + sse.PING_SECONDS
                    due = pacing.next_due()
                    if due is not None:
                        wake = min(wake, due)
                    await sub.wait(max(0.0, wake - loop.time()))
                    handed, reread = sub.take_handed()
                    if not sub.closed and loop.time() - last_write >= sse.PING_SECONDS:
                        yield sse.ping()
                        last_write = loop.time()
        finally:
            # A task of its own, so the cancel that ends the stream does not cancel the
            # close, and nothing here holds off a cancel (no shielding): a shutdown never
            # waits on it for more than a moment (startup clears stale owners anyway).
            closing = _uncut(fleet.stream_closed(ctx, worker.id, owner))
            await asyncio.wait({closing}, timeout=STREAM_CLOSE_SECONDS)

    return sse.stream(events())


@router.post("/heartbeat", response_model=HeartbeatOut)
async def heartbeat(ctx: Ctx, worker: CurrentWorker, body: HeartbeatIn) -> HeartbeatOut:
    says_no_job = body.status == "idle" or (
        "current_job_id" in body.model_fields_set and body.current_job_id is None
    )
    stats = None
    if body.gpu_stats is not None:
        stats = [GpuStat(**g.model_dump(include=_GPU_STAT_FIELDS)) for g in body.gpu_stats]
    w = await fleet.heartbeat(
        ctx, worker, body.worker_id, body.current_job_id, says_no_job, gpu_stats=stats
    )
    return HeartbeatOut(ok=True, status=w.status.value, draining=w.drained)


@router.post("/job/{job_id}/status", response_model=StatusOut)
async def job_status(ctx: Ctx, worker: CurrentWorker, job_id: str, body: StatusIn) -> StatusOut:
    report = StatusReport(
        status=body.status,
        attempt_id=body.attempt_id,
        error=body.error,
        exit_code=body.exit_code,
        progress=body.progress,
    )
    status = await reports.report_status(ctx, worker, job_id, report)
    return StatusOut(ok=True, job_status=status.value)


@router.post("/job/{job_id}/logs", response_model=Ok)
async def job_logs(ctx: Ctx, worker: CurrentWorker, job_id: str, body: LogsIn) -> Ok:
    await reports.append_logs(
        ctx,
        worker,
        job_id,
        body.attempt_id,
        [(line.stream, line.text) for line in body.lines],
        first=body.first,
    )
    return Ok()


_NOT_YET: dict[int | str, dict[str, Any]] = {
    501: {"description": "Uploads are not stored by the orchestrator yet"}
}


@router.put("/job/{job_id}/upload", responses=_NOT_YET, operation_id="job_upload_put")
@router.post("/job/{job_id}/upload", responses=_NOT_YET, operation_id="job_upload_post")
async def job_upload(ctx: Ctx, worker: CurrentWorker, job_id: str) -> None:
    raise await reports.refuse_upload(ctx, worker, job_id)


@router.get("/queue")
async def queue_check(
    ctx: Ctx, worker: CurrentWorker, worker_id: Annotated[str | None, Query()] = None
) -> dict[str, bool]:
    return {"has_jobs": await fleet.has_jobs(ctx, worker, worker_id)}


@router.post("/disconnect", response_model=Ok)
async def disconnect(
    ctx: Ctx, worker: CurrentWorker, client: Client, body: WorkerIdIn | None = None
) -> Ok:
    await fleet.disconnect(ctx, worker, body.worker_id if body else None, client)
    return Ok()
