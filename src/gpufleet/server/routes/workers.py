"""The worker API (`X-Worker-Token`): register, stream, heartbeat, report, the job's secrets,
disconnect. The job's files are `routes/uploads.py` and `routes/checkpoints.py`.

Its paths and the events its stream carries are the wire protocol: `gpufleet/protocol.py`."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Query
from starlette.responses import StreamingResponse

from gpufleet import protocol
from gpufleet.domain.records import GpuStat
from gpufleet.server import sse
from gpufleet.server.deps import AttemptToken, Client, Ctx, CurrentWorker
from gpufleet.server.plain import PlainRoute
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.agent import (
    GpuHealthIn,
    GpuStatIn,
    HeartbeatIn,
    HeartbeatOut,
    JobSecretsOut,
    LogsIn,
    RegisterIn,
    RegisterOut,
    StatusIn,
    StatusOut,
    WorkerIdIn,
)
from gpufleet.server.schemas.base import SSE_RESPONSE, Ok
from gpufleet.server.services import agents, job_secrets, node_reports, reports
from gpufleet.server.services.agents import Registration
from gpufleet.server.services.node_reports import NodeReport
from gpufleet.server.services.reports import StatusReport
from gpufleet.server.streams import WorkerStream

# Served by plain endpoints (server/plain.py): a fleet's heartbeats and reports are most of
# the requests it makes, and FastAPI's dependency solving and response models were a tenth of
# a job's CPU (#39). The declarations below stay FastAPI's: the OpenAPI document reads them.
router = api_router(prefix=protocol.WORKER_API, tags=["workers"], route_class=PlainRoute)
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
        gpu_health=None if (readings := body.readings()) is None else tuple(readings),
        preflight=body.preflight_result(),
    )


@router.post("/register", response_model=RegisterOut)
async def register(
    ctx: Ctx, worker: CurrentWorker, client: Client, body: RegisterIn
) -> RegisterOut:
    answer = await agents.register(ctx, worker, _registration(body), client)
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


@router.get("/stream", responses=SSE_RESPONSE)
async def stream(
    ctx: Ctx, worker: CurrentWorker, worker_id: Annotated[str | None, Query()] = None
) -> StreamingResponse:
    return sse.stream((await WorkerStream.open(ctx, worker, worker_id)).events())


def _stat(load: GpuStatIn, health: GpuHealthIn | None) -> GpuStat:
    """One GPU's sample: its load, with its temperature and throttling when its health came."""
    stat = GpuStat(**load.model_dump(include=_GPU_STAT_FIELDS))
    if health is None:
        return stat
    throttle = ", ".join(health.throttle) or None
    return dataclasses.replace(stat, temperature_c=health.temperature_c, throttle=throttle)


@router.post("/heartbeat", response_model=HeartbeatOut)
async def heartbeat(ctx: Ctx, worker: CurrentWorker, body: HeartbeatIn) -> HeartbeatOut:
    says_no_job = body.status == "idle" or (
        "current_job_id" in body.model_fields_set and body.current_job_id is None
    )
    stats = None
    if body.gpu_stats is not None:
        health = {g.index: g for g in body.gpu_health or ()}
        stats = [_stat(g, health.get(g.index)) for g in body.gpu_stats]
    w = await agents.heartbeat(
        ctx,
        worker,
        body.worker_id,
        body.current_job_id,
        says_no_job,
        gpu_stats=stats,
        gpu_readings=body.readings(),
        preflight=body.preflight_result(),
    )
    return HeartbeatOut(ok=True, status=w.status.value, draining=w.drained)


@router.post("/job/{job_id}/status", response_model=StatusOut)
async def job_status(
    ctx: Ctx,
    worker: CurrentWorker,
    client: Client,
    job_id: str,
    body: StatusIn,
    token: AttemptToken = None,
) -> StatusOut:
    report = StatusReport(
        status=body.status,
        attempt_id=body.attempt_id,
        error=body.error,
        exit_code=body.exit_code,
        progress=body.progress,
        points=body.points,
    )
    if body.node_rank is not None:
        node = NodeReport(report, body.node_rank, body.port, body.address)
        status = await node_reports.report_node(ctx, worker, job_id, node, client, token)
    else:
        status = await reports.report_status(ctx, worker, job_id, report, token)
    return StatusOut(ok=True, job_status=status.value)


@router.post("/job/{job_id}/logs", response_model=Ok)
async def job_logs(
    ctx: Ctx, worker: CurrentWorker, job_id: str, body: LogsIn, token: AttemptToken = None
) -> Ok:
    await reports.append_logs(
        ctx,
        worker,
        job_id,
        body.attempt_id,
        [(line.stream, line.text) for line in body.lines],
        first=body.first,
        attempt_token=token,
        node_rank=body.node_rank,
    )
    return Ok()


@router.get("/job/{job_id}/secrets", response_model=JobSecretsOut)
async def job_secrets_for_attempt(
    ctx: Ctx,
    worker: CurrentWorker,
    job_id: str,
    attempt_id: Annotated[str | None, Query(max_length=64)] = None,
    token: AttemptToken = None,
) -> JobSecretsOut:
    """The values of the secrets the job's env refers to, for its live attempt on this
    worker only (and, from a worker that binds its calls, with that attempt's token): the
    worker puts them in the job's process environment, nowhere else."""
    return JobSecretsOut(env=await job_secrets.for_attempt(ctx, worker, job_id, attempt_id, token))


@router.get("/queue")
async def queue_check(
    ctx: Ctx, worker: CurrentWorker, worker_id: Annotated[str | None, Query()] = None
) -> dict[str, bool]:
    return {"has_jobs": await agents.has_jobs(ctx, worker, worker_id)}


@router.post("/disconnect", response_model=Ok)
async def disconnect(
    ctx: Ctx, worker: CurrentWorker, client: Client, body: WorkerIdIn | None = None
) -> Ok:
    await agents.disconnect(ctx, worker, body.worker_id if body else None, client)
    return Ok()
