"""A job's artifacts as its users see them: list, download, delete and pin (its owner, a
lead of its team or an admin: `domain.ownership`).

Downloads from the data folder are its file, served by the orchestrator (Range requests too),
or are a presigned URL the
caller is redirected to when the store is a bucket (the bytes then never pass through here).
A delete removes the blobs first, then the rows: a row is the sweep's note of what is still
to delete, so a blob that failed to go is tried again rather than forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from gpufleet.artifacts import tar
from gpufleet.domain.node_checkpoints import Completion, completion, node_path, split_node_path
from gpufleet.domain.ownership import JobAction
from gpufleet.domain.records import Artifact, Checkpoint, Job, User
from gpufleet.errors import ArtifactStoreError, NotFound
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import ownership
from gpufleet.server.services.lifecycle import no_job

log = logging.getLogger("gpufleet.server.artifacts")
PRESIGNED_FOR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class JobArtifacts:
    job: Job
    artifacts: list[Artifact]  # newest attempt first
    checkpoints: list[Checkpoint]  # newest attempt first
    total_bytes: int
    # A multi-node job's checkpoints: which nodes committed their part (by checkpoint id).
    nodes: Mapping[str, Completion] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Redirect:
    artifact: Artifact
    url: str  # presigned: the store serves the bytes


@dataclass(frozen=True, slots=True)
class Stream:
    artifact: Artifact
    chunks: AsyncIterator[bytes]  # the orchestrator serves them


@dataclass(frozen=True, slots=True)
class File:
    artifact: Artifact
    path: Path  # the data folder's file: the orchestrator serves it as it is


async def list_for_job(ctx: Context, job_id: str) -> JobArtifacts:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        if job is None:
            raise no_job(job_id)
        found = await q.artifacts_for_job(job_id)
        checkpoints = await q.checkpoints_for_job(job_id)
        parts = await q.checkpoint_node_ranks([c.id for c in checkpoints]) if job.nodes > 1 else {}
    newest_first = sorted(
        checkpoints, key=lambda c: (c.attempt_number or 0, c.created_at), reverse=True
    )
    nodes = {c.id: completion(job.nodes, parts.get(c.id, ())) for c in checkpoints if job.nodes > 1}
    return JobArtifacts(job, found, newest_first, sum(a.size for a in found), nodes)


def pick(found: Sequence[Artifact], job_id: str, path: str, attempt_id: str | None) -> Artifact:
    """The artifact at `path` of the attempt asked for, else of the newest attempt holding it."""
    for art in found:  # newest attempt first
        if art.path == path and attempt_id in (None, art.attempt_id):
            return art
    which = f" in attempt {attempt_id}" if attempt_id else ""
    raise NotFound(
        f"job {job_id} has no artifact {path[:200]!r}{which}; list them with "
        f"GET /api/queue/{job_id}/artifacts",
        cli=f"list them with: gpufleet jobs artifacts {job_id}",
    )


async def download(
    ctx: Context, job_id: str, path: str, attempt_id: str | None
) -> Redirect | Stream | File:
    async with ctx.store.read() as q:
        if await q.get_job(job_id) is None:
            raise no_job(job_id)
        art = pick(await q.artifacts_for_job(job_id), job_id, path, attempt_id)
    url = await ctx.artifacts.presign_get(art.key, PRESIGNED_FOR)
    if url is not None:
        return Redirect(art, url)
    if (file := await ctx.artifacts.file(art.key)) is not None:
        return File(art, file)
    return Stream(art, counted(ctx, await ctx.artifacts.open(art.key)))


@dataclass(frozen=True, slots=True)
class Archive:
    checkpoint: Checkpoint
    size: int  # the tar's bytes
    chunks: AsyncIterator[bytes]


def _in_archive(checkpoint: Checkpoint, path: str) -> str | None:
    """A checkpoint's file's name in its tar: `checkpoint-1200/…`, a gang's node K's part
    under `checkpoint-1200/node-K/…`; None for a file outside its folder."""
    folder = checkpoint.path + "/"
    if path.startswith(folder):
        return f"{checkpoint.name}/{path[len(folder) :]}"
    part = split_node_path(path)
    if part is not None and part[1].startswith(folder):
        return f"{checkpoint.name}/{node_path(part[0], part[1][len(folder) :])}"
    return None


async def checkpoint_archive(ctx: Context, job_id: str, checkpoint_id: str) -> Archive:
    """A committed checkpoint of the job as one tar of its folder (`checkpoint-1200/…`),
    streamed through the orchestrator from the store."""
    async with ctx.store.read() as q:
        if await q.get_job(job_id) is None:
            raise no_job(job_id)
        checkpoint = await q.get_checkpoint(checkpoint_id)
        if checkpoint is None or checkpoint.job_id != job_id:
            raise NotFound(
                f"job {job_id} has no checkpoint {checkpoint_id[:64]!r}; list them with "
                f"GET /api/queue/{job_id}/artifacts",
                cli=f"list them with: gpufleet jobs artifacts {job_id}",
            )
        files = await q.checkpoint_files(checkpoint.attempt_id, checkpoint.name)
    members = [
        tar.Member(name, a.size, a.created_at, a.key)
        for a in files
        if (name := _in_archive(checkpoint, a.path)) is not None
    ]
    chunks = counted(ctx, tar.archive(members, ctx.artifacts.open))
    return Archive(checkpoint, tar.archive_size(members), chunks)


async def counted(ctx: Context, source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`source`, its bytes counted as downloaded as they are sent."""
    async for chunk in source:
        ctx.metrics.artifact_bytes_downloaded.inc(len(chunk))
        yield chunk


async def delete(
    ctx: Context, job_id: str, path: str | None, actor: str, client: str | None, *, by: User
) -> int:
    """Delete the job's artifact at `path` (every attempt's), or all of them, if `by` may
    (`domain.ownership`); a checkpoint that loses a file goes with it (it could no longer be
    resumed from). The count deleted."""
    listed = await list_for_job(ctx, job_id)
    async with ctx.store.read() as q:
        await ownership.require(q, by, listed.job, JobAction.DELETE_ARTIFACTS)
    doomed = [a for a in listed.artifacts if path is None or a.path == path]
    if path is not None and not doomed:
        pick(doomed, job_id, path, None)  # raises the NotFound that says what to do
    broken = {(a.attempt_id, a.checkpoint) for a in doomed if a.checkpoint is not None}
    checkpoints = [
        c.id for c in listed.checkpoints if path is None or (c.attempt_id, c.name) in broken
    ]
    await remove(ctx, doomed, checkpoints, actor, client, reason=lambda _job: "deleted")
    return len(doomed)


async def remove(
    ctx: Context,
    doomed: Sequence[Artifact],
    checkpoint_ids: Sequence[str],
    actor: str,
    client: str | None,
    *,
    reason: Callable[[str], str],
) -> None:
    """Blobs, then rows, then one audit entry per job (the retention sweep uses it too)."""
    gone: list[Artifact] = []
    failure: ArtifactStoreError | None = None
    for art in doomed:
        try:
            await ctx.artifacts.delete(art.key)
        except ArtifactStoreError as exc:  # its row stays, for the next try
            log.warning("could not delete %s: %s", art.key, exc)
            failure = exc
            continue
        gone.append(art)
    async with transaction(ctx) as tx:
        if failure is None:  # else a checkpoint keeps its row until all its files are gone
            await tx.q.delete_checkpoints(list(checkpoint_ids))
        await tx.q.delete_artifacts([a.id for a in gone])
        for job_id in sorted({a.job_id for a in gone}):
            mine = [a for a in gone if a.job_id == job_id]
            tx.audit(
                "artifact.deleted",
                actor,
                job_id,
                client,
                count=len(mine),
                bytes=sum(a.size for a in mine),
                paths=sorted({a.path for a in mine})[:50],
                reason=reason(job_id),
            )
    if failure is not None:
        raise failure


async def pin(
    ctx: Context, job_id: str, pinned: bool, actor: str, client: str | None, *, by: User
) -> Job:
    async with transaction(ctx) as tx:
        job = await tx.q.get_job(job_id, lock=True)
        if job is None:
            raise no_job(job_id)
        await ownership.require(tx.q, by, job, JobAction.PIN)
        await tx.q.set_artifacts_pinned(job_id, pinned)
        tx.audit("artifacts.pinned", actor, job_id, client, pinned=pinned)
        updated = await tx.q.get_job(job_id)
    if updated is None:
        raise no_job(job_id)
    return updated
