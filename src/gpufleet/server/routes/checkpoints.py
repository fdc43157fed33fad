"""Checkpoints, the worker's side (`X-Worker-Token`, docs/artifacts.md, Worker API): commit
one whose files are stored, fetch one to resume from, download a stored file. Paths under
the worker API: `gpufleet/protocol.py`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from starlette.responses import Response, StreamingResponse

from gpufleet import protocol
from gpufleet.server.deps import AttemptToken, Ctx, CurrentWorker
from gpufleet.server.file_response import served
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.uploads import (
    CheckpointFetchOut,
    CheckpointIn,
    CheckpointOut,
    FetchFileOut,
)
from gpufleet.server.services import checkpoints

router = api_router(prefix=protocol.WORKER_API, tags=["workers"])


@router.post("/job/{job_id}/checkpoints", status_code=201, response_model=CheckpointOut)
async def job_checkpoint_commit(
    ctx: Ctx, worker: CurrentWorker, job_id: str, body: CheckpointIn, token: AttemptToken = None
) -> CheckpointOut:
    commit = checkpoints.CheckpointCommit(
        attempt_id=body.attempt_id,
        name=body.name,
        path=body.path,
        step=body.step,
        files=[checkpoints.CheckpointFile(f.path, f.size, f.sha256) for f in body.files],
        node_rank=body.node_rank,
    )
    return CheckpointOut.of(await checkpoints.commit_checkpoint(ctx, worker, job_id, commit, token))


@router.get("/job/{job_id}/checkpoints/{checkpoint_id}", response_model=CheckpointFetchOut)
async def job_checkpoint_fetch(
    ctx: Ctx,
    worker: CurrentWorker,
    job_id: str,
    checkpoint_id: str,
    attempt_id: Annotated[str | None, Query(max_length=64)] = None,
    token: AttemptToken = None,
) -> CheckpointFetchOut:
    checkpoint, files = await checkpoints.fetch_checkpoint(
        ctx, worker, job_id, checkpoint_id, attempt_id, token
    )
    return CheckpointFetchOut(
        id=checkpoint.id,
        name=checkpoint.name,
        path=checkpoint.path,
        step=checkpoint.step,
        files=[
            FetchFileOut(
                path=f.path,
                size=f.artifact.size,
                sha256=f.artifact.sha256,
                url=f.url,
                headers=f.headers,
            )
            for f in files
        ],
    )


@router.get(
    "/job/{job_id}/artifacts/{artifact_id}",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def job_artifact_download(
    ctx: Ctx,
    worker: CurrentWorker,
    job_id: str,
    artifact_id: str,
    attempt_id: Annotated[str | None, Query(max_length=64)] = None,
    token: AttemptToken = None,
) -> Response:
    artifact, source = await checkpoints.download(
        ctx, worker, job_id, artifact_id, attempt_id, token
    )
    return served(
        source,
        size=artifact.size,
        sha256=artifact.sha256,
        media_type="application/octet-stream",
        headers={"X-Gpufleet-Sha256": artifact.sha256},
    )
