"""A job's artifacts for its users: list and download (`queue.read`), delete and pin
(`queue.submit`, by its owner, a lead of its team or an admin: `domain.ownership`)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Query
from starlette.responses import RedirectResponse, Response, StreamingResponse

from gpufleet.artifacts.keys import checked_path
from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.file_response import served
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.artifacts import ArtifactList, Deleted, PinIn, PinOut
from gpufleet.server.services import artifacts
from gpufleet.server.services.auth import Principal

router = api_router(tags=["artifacts"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Writer = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]
AttemptId = Annotated[str | None, Query(min_length=1, max_length=64)]


@router.get("/api/queue/{job_id}/artifacts", response_model=ArtifactList)
async def list_artifacts(ctx: Ctx, who: Reader, job_id: str) -> ArtifactList:
    """Every stored artifact and committed checkpoint of the job, newest attempt first."""
    return ArtifactList.of(await artifacts.list_for_job(ctx, job_id))


@router.put("/api/queue/{job_id}/artifacts/pin", response_model=PinOut)
async def pin_artifacts(ctx: Ctx, who: Writer, client: Client, job_id: str, body: PinIn) -> PinOut:
    """A pinned job's artifacts outlive the retention period and its checkpoints are all
    kept; unpinning hands them back to the retention sweep."""
    job = await artifacts.pin(ctx, job_id, body.pinned, who.actor, client, by=who.user)
    return PinOut(job_id=job.id, pinned=job.artifacts_pinned)


@router.get(
    "/api/queue/{job_id}/artifacts/{path:path}",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file."},
        206: {"description": "The `Range` asked for (the data folder's files)."},
        307: {"description": "Where the store serves it (a presigned URL, valid an hour)."},
    },
)
async def download_artifact(
    ctx: Ctx, who: Reader, job_id: str, path: str, attempt_id: AttemptId = None
) -> Response:
    """The file at `path` (of `attempt_id`, else of the newest attempt holding it), with its
    sha256 in `X-Gpufleet-Sha256` (and as the `ETag`: a `Range` with `If-Range` resumes a
    download of the same bytes); or a redirect to a presigned URL of the bucket."""
    found = await artifacts.download(ctx, job_id, checked_path(path), attempt_id)
    art = found.artifact
    headers = {"X-Gpufleet-Sha256": art.sha256}
    if isinstance(found, artifacts.Redirect):
        return RedirectResponse(found.url, status_code=307, headers=headers)
    name = quote(art.path.rsplit("/", 1)[-1], safe="")
    headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{name}"
    return served(
        found.path if isinstance(found, artifacts.File) else found.chunks,
        size=art.size,
        sha256=art.sha256,
        media_type="application/octet-stream",
        headers=headers,
        sent=ctx.metrics.artifact_bytes_downloaded.inc,
    )


@router.get(
    "/api/queue/{job_id}/checkpoints/{checkpoint_id}",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}, "description": "The folder."}},
)
async def download_checkpoint(ctx: Ctx, who: Reader, job_id: str, checkpoint_id: str) -> Response:
    """A committed checkpoint's folder as one tar (`checkpoint-1200/…`), its files streamed
    through the orchestrator from the store."""
    found = await artifacts.checkpoint_archive(ctx, job_id, checkpoint_id)
    name = quote(f"{found.checkpoint.name}.tar", safe="")
    headers = {
        "Content-Length": str(found.size),
        "Content-Disposition": f"attachment; filename*=UTF-8''{name}",
    }
    return StreamingResponse(found.chunks, media_type="application/x-tar", headers=headers)


@router.delete("/api/queue/{job_id}/artifacts", response_model=Deleted)
async def delete_all_artifacts(ctx: Ctx, who: Writer, client: Client, job_id: str) -> Deleted:
    """Every artifact and checkpoint of the job, from the store and the list."""
    count = await artifacts.delete(ctx, job_id, None, who.actor, client, by=who.user)
    return Deleted(job_id=job_id, deleted=count)


@router.delete("/api/queue/{job_id}/artifacts/{path:path}", response_model=Deleted)
async def delete_artifact(ctx: Ctx, who: Writer, client: Client, job_id: str, path: str) -> Deleted:
    """The artifact at `path`, in every attempt; a checkpoint it belonged to goes too."""
    count = await artifacts.delete(ctx, job_id, checked_path(path), who.actor, client, by=who.user)
    return Deleted(job_id=job_id, deleted=count)
