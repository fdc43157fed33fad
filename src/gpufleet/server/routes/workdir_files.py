"""A job's code, for the job page's Code panel (`queue.read`, and the caller may read the
job's code: its owner, its team, an admin): the files of the snapshot its config names, and
the text of one small file (docs/api.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from gpufleet.artifacts.workdir_archive import MAX_NAME_BYTES
from gpufleet.domain.permissions import QUEUE_READ
from gpufleet.server.deps import Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.workdirs import WorkdirCodeOut, WorkdirEntryOut, WorkdirFileOut
from gpufleet.server.services import workdir_files
from gpufleet.server.services.auth import Principal

router = api_router(tags=["workdirs"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]


@router.get("/api/queue/{job_id}/workdir", response_model=WorkdirCodeOut)
async def job_code(ctx: Ctx, who: Reader, job_id: str) -> WorkdirCodeOut:
    """The snapshot the job's config names: digest, size and its entries (path, size,
    type); 404 when it names none, 403 to a caller outside its team."""
    code = await workdir_files.code_of(ctx, who.user, job_id)
    shown = code.entries[: workdir_files.LISTED_MAX]
    return WorkdirCodeOut(
        digest=code.snapshot.digest,
        size=code.snapshot.size,
        stored_at=code.snapshot.stored_at,
        total=len(code.entries),
        truncated=len(shown) < len(code.entries),
        files=[WorkdirEntryOut(path=e.path, size=e.size, type=e.kind, link=e.link) for e in shown],
    )


@router.get("/api/queue/{job_id}/workdir/file", response_model=WorkdirFileOut)
async def job_code_file(
    ctx: Ctx,
    who: Reader,
    job_id: str,
    path: Annotated[str, Query(max_length=MAX_NAME_BYTES)],
) -> WorkdirFileOut:
    """One file of the job's code: its text when it is UTF-8 text of at most 256 KiB, else
    its `status` says why not (`binary`, `too_large`, `link`); 422 for a path no workdir
    may hold (absolute, `..`, a control character)."""
    found = await workdir_files.read_file(ctx, who.user, job_id, path)
    return WorkdirFileOut(
        path=found.entry.path,
        size=found.entry.size,
        status=found.status,
        text=found.text,
        link=found.entry.link,
    )
