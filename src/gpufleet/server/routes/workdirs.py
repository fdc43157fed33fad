"""Workdir snapshots (docs/jobs.md): upload one by its digest (`queue.submit`), ask whether
one you may name is stored (`queue.read`), and the worker's download of its job's
(`X-Worker-Token`, fenced by attempt)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from gpufleet import protocol
from gpufleet.artifacts.workdir_archive import WORKDIR_PREFIX
from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.server.deps import AttemptToken, Client, Ctx, CurrentWorker, require
from gpufleet.server.file_response import served
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.workdirs import WorkdirOut
from gpufleet.server.services import workdirs
from gpufleet.server.services.auth import Principal

router = api_router(tags=["workdirs"])
worker_router = api_router(prefix=protocol.WORKER_API, tags=["workers"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Writer = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]

_RAW_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _out(
    snapshot: workdirs.Snapshot, created: bool | None = None, read: bool | None = None
) -> WorkdirOut:
    return WorkdirOut(
        digest=snapshot.digest,
        size=snapshot.size,
        stored_at=snapshot.stored_at,
        created=created,
        read=read,
    )


@router.put(
    "/api/workdirs/{digest}",
    status_code=201,
    response_model=WorkdirOut,
    openapi_extra=_RAW_BODY,
    responses={
        200: {
            "model": WorkdirOut,
            "description": "It was stored already: the caller holds it now (`read`: its "
            "bytes were read and checked), or held it already (its bytes were not read).",
        }
    },
)
async def upload_workdir(
    ctx: Ctx, who: Writer, client: Client, digest: str, request: Request, response: Response
) -> WorkdirOut:
    """Store a workdir snapshot (a canonical tar, docs/jobs.md) under its `sha256:<hex>`
    digest and hold it; its size (Content-Length) and sha256 are checked as it streams, its
    entries before it is stored. 200 when it was stored already: its bytes are read and
    checked all the same, unless the caller holds it already."""
    length = request.headers.get("content-length")
    size = int(length) if length is not None and length.isdigit() else None
    stored = await workdirs.upload(
        ctx, digest, request.stream(), size, who.actor, client, user_id=who.user.id
    )
    if not stored.created:
        response.status_code = 200
    return _out(stored.snapshot, stored.created, stored.read)


@router.head("/api/workdirs/{digest}", status_code=200, response_class=Response)
async def workdir_stored(ctx: Ctx, who: Reader, digest: str) -> Response:
    """200 with the snapshot's size when it is stored and the caller may name it (nothing to
    upload), else 404."""
    snapshot = await workdirs.get_for(ctx, who.user.id, digest)
    return Response(headers={"Content-Length": str(snapshot.size)})


@router.get("/api/workdirs/{digest}", response_model=WorkdirOut)
async def workdir_info(ctx: Ctx, who: Reader, digest: str) -> WorkdirOut:
    """The stored snapshot's digest, size and when it was stored; 404 when it is not, or the
    caller may not name it."""
    return _out(await workdirs.get_for(ctx, who.user.id, digest))


@worker_router.get(
    "/job/{job_id}/workdir",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}}},
)
async def job_workdir_download(
    ctx: Ctx,
    worker: CurrentWorker,
    job_id: str,
    attempt_id: Annotated[str | None, Query(max_length=64)] = None,
    token: AttemptToken = None,
) -> Response:
    """The snapshot the job's config names, for its live attempt on this worker."""
    snapshot, source = await workdirs.open_for_attempt(ctx, worker, job_id, attempt_id, token)
    return served(
        source,
        size=snapshot.size,
        sha256=snapshot.digest.removeprefix(WORKDIR_PREFIX),
        media_type="application/x-tar",
        headers={"X-Gpufleet-Digest": snapshot.digest},
    )
