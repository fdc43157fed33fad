"""Administration: workers and API keys (`admin.workers`; minting keys needs `*`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from gpufleet.address import own_executable
from gpufleet.domain.permissions import ADMIN_WORKERS, ALL
from gpufleet.domain.presence import presence_tones, tally
from gpufleet.domain.states import WorkerStatus
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.admin import ApiKeyOut, CreateApiKey, CreatedApiKey
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.workers import (
    CreatedWorker,
    CreateWorker,
    OrchestratorOut,
    RotatedToken,
    SetLabelsIn,
    UnmatchedJob,
    WorkerDetail,
    WorkerList,
    WorkerOut,
)
from gpufleet.server.services import auth, fleet, waiting
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api/admin", tags=["admin"])
Admin = Annotated[Principal, Depends(require(ADMIN_WORKERS))]
Root = Annotated[Principal, Depends(require(ALL))]


@router.get("/workers", response_model=WorkerList)
async def list_workers(
    ctx: Ctx, who: Admin, status: Annotated[list[WorkerStatus] | None, Query()] = None
) -> WorkerList:
    workers = await fleet.list_workers(ctx, [s.value for s in status or []])
    fleet_all = await fleet.list_workers(ctx) if status else workers
    unmatched = await waiting.unmatched_jobs(ctx, fleet_all)
    return WorkerList(
        workers=[WorkerOut.shown(w, ctx.settings.silence()) for w in workers],
        counts=tally(workers),
        tones=presence_tones(),
        unmatched_jobs=[
            UnmatchedJob(job_id=job.id, **waiting.waiting_fields(why)) for job, why in unmatched
        ],
    )


@router.get("/orchestrator", response_model=OrchestratorOut)
async def orchestrator(ctx: Ctx, who: Admin) -> OrchestratorOut:
    """What a new worker's command needs: the URL workers reach this orchestrator at
    (`--public-url`), and this installation's own `gpufleet` for a worker on this machine."""
    return OrchestratorOut(
        public_url=ctx.settings.worker_url(),
        listening_on=ctx.settings.host,
        gpufleet=own_executable(),
    )


@router.post("/workers", response_model=CreatedWorker, status_code=201)
async def create_worker(ctx: Ctx, who: Admin, client: Client, body: CreateWorker) -> CreatedWorker:
    worker, token = await fleet.create_worker(
        ctx, body.name, body.worker_type, body.labels, who.actor, client
    )
    return CreatedWorker(worker_id=worker.id, token=token, name=worker.name)


@router.get("/workers/{worker_id}", response_model=WorkerDetail)
async def get_worker(ctx: Ctx, who: Admin, worker_id: str) -> WorkerDetail:
    worker, history = await fleet.worker_detail(ctx, worker_id)
    return WorkerDetail.of_detail(worker, history, ctx.settings.silence())


@router.put("/workers/{worker_id}/labels", response_model=WorkerOut)
async def set_worker_labels(
    ctx: Ctx, who: Admin, client: Client, worker_id: str, body: SetLabelsIn
) -> WorkerOut:
    """Replace the worker's admin labels; on a clash they win over the labels it reports."""
    worker = await fleet.set_admin_labels(ctx, worker_id, body.labels, who.actor, client)
    return WorkerOut.shown(worker, ctx.settings.silence())


@router.post("/workers/{worker_id}/drain", response_model=WorkerOut)
async def drain_worker(ctx: Ctx, who: Admin, client: Client, worker_id: str) -> WorkerOut:
    worker = await fleet.drain(ctx, worker_id, who.actor, client)
    return WorkerOut.shown(worker, ctx.settings.silence())


@router.post("/workers/{worker_id}/undrain", response_model=WorkerOut)
async def undrain_worker(ctx: Ctx, who: Admin, client: Client, worker_id: str) -> WorkerOut:
    worker = await fleet.undrain(ctx, worker_id, who.actor, client)
    return WorkerOut.shown(worker, ctx.settings.silence())


@router.post("/workers/{worker_id}/token", response_model=RotatedToken)
async def rotate_token(ctx: Ctx, who: Admin, client: Client, worker_id: str) -> RotatedToken:
    token = await fleet.rotate_token(ctx, worker_id, who.actor, client)
    return RotatedToken(worker_id=worker_id, token=token)


@router.delete("/workers/{worker_id}", response_model=Ok)
async def delete_worker(ctx: Ctx, who: Admin, client: Client, worker_id: str) -> Ok:
    await fleet.delete_worker(ctx, worker_id, who.actor, client)
    return Ok()


@router.get("/api-keys", response_model=list[ApiKeyOut])
async def list_api_keys(ctx: Ctx, who: Root) -> list[ApiKeyOut]:
    keys, users = await auth.list_api_keys(ctx)
    return [ApiKeyOut.of(k, users) for k in keys]


@router.post("/api-keys", response_model=CreatedApiKey, status_code=201)
async def create_api_key(ctx: Ctx, who: Root, client: Client, body: CreateApiKey) -> CreatedApiKey:
    """A key for `user` (id or name; default: your own), within what their level allows."""
    key, raw, owner = await auth.mint_api_key(
        ctx, body.name, body.permissions, who, client, user=body.user
    )
    return CreatedApiKey(key=raw, **ApiKeyOut.of(key, {owner.id: owner.name}).model_dump())


@router.delete("/api-keys/{key_id}", response_model=Ok)
async def revoke_api_key(ctx: Ctx, who: Root, client: Client, key_id: str) -> Ok:
    await auth.revoke_api_key(ctx, key_id, who.actor, client)
    return Ok()
