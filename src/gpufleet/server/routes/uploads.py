"""A job's files coming home, the worker's side (`X-Worker-Token`, docs/artifacts.md, Worker
API): announce a file, send its bytes through the orchestrator, complete an upload sent to
a presigned URL. Paths under the worker API: `gpufleet/protocol.py`."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from gpufleet import protocol
from gpufleet.domain.records import Artifact, ArtifactKind
from gpufleet.server.deps import AttemptToken, Ctx, CurrentWorker
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.uploads import ArtifactOut, UploadExistsOut, UploadIn, UploadOut
from gpufleet.server.services import uploads

router = api_router(prefix=protocol.WORKER_API, tags=["workers"])


@router.post("/job/{job_id}/upload", response_model=UploadOut | UploadExistsOut)
async def job_upload(
    ctx: Ctx, worker: CurrentWorker, job_id: str, body: UploadIn, token: AttemptToken = None
) -> UploadOut | UploadExistsOut:
    announced = uploads.Announce(
        attempt_id=body.attempt_id,
        path=body.path,
        size=body.size,
        sha256=body.sha256,
        kind=ArtifactKind(body.kind),
        checkpoint=body.checkpoint,
    )
    plan = await uploads.announce(ctx, worker, job_id, announced, token)
    if isinstance(plan, Artifact):
        return UploadExistsOut(artifact=ArtifactOut.of(plan))
    return UploadOut(upload_id=plan.upload_id, url=plan.url, headers=plan.headers, via=plan.via)


def _content_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


_RAW_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put(
    "/job/{job_id}/upload/{upload_id}",
    status_code=201,
    response_model=ArtifactOut,
    openapi_extra=_RAW_BODY,
)
async def job_upload_bytes(
    ctx: Ctx,
    worker: CurrentWorker,
    job_id: str,
    upload_id: str,
    request: Request,
    token: AttemptToken = None,
) -> ArtifactOut:
    stored = await uploads.send(
        ctx, worker, job_id, upload_id, request.stream(), _content_length(request), token
    )
    return ArtifactOut.of(stored)


@router.post(
    "/job/{job_id}/upload/{upload_id}/complete", status_code=201, response_model=ArtifactOut
)
async def job_upload_complete(
    ctx: Ctx, worker: CurrentWorker, job_id: str, upload_id: str, token: AttemptToken = None
) -> ArtifactOut:
    return ArtifactOut.of(await uploads.complete(ctx, worker, job_id, upload_id, token))
