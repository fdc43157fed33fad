"""Checkpoints (docs/artifacts.md, Worker API): a worker commits a checkpoint folder whose
every file is stored for its attempt, and the attempt that resumes from it fetches where its
files download from. Fenced like every artifact call (`job_fence.live_job`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from gpufleet import protocol
from gpufleet.artifacts.keys import checked_path
from gpufleet.artifacts.store import checked_sha256
from gpufleet.domain.node_checkpoints import node_path
from gpufleet.domain.records import Artifact, Checkpoint, Job, Worker
from gpufleet.domain.secrets import new_id
from gpufleet.errors import InvalidInput, NotFound
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import job_topic
from gpufleet.server.services import attempt_tokens
from gpufleet.server.services.job_fence import live_job, live_node, offered_job
from gpufleet.server.services.job_inputs import may_take
from gpufleet.server.services.uploads import check_name
from gpufleet.store import Queries

FETCH_TTL = timedelta(hours=12)  # a presigned download URL of a checkpoint's file
_MAX_NAMED = 10  # missing files a refused checkpoint commit names


@dataclass(frozen=True, slots=True)
class FetchFile:
    artifact: Artifact
    url: str
    headers: dict[str, str]
    path: str  # where it goes in the job folder (a gang's node-K/ taken off)


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class CheckpointCommit:
    attempt_id: str
    name: str
    path: str
    step: int | None
    files: list[CheckpointFile]
    node_rank: int | None = None  # a multi-node job's node committing its part


def _check_commit(commit: CheckpointCommit) -> None:
    check_name(commit.name)
    folder = checked_path(commit.path) + "/"
    if commit.node_rank is not None:  # its files are stored under node-K/
        folder = node_path(commit.node_rank, folder)
    if not commit.files:
        raise InvalidInput(f"checkpoint {commit.name!r} lists no files; list what it holds")
    for f in commit.files:
        checked_path(f.path)
        if not f.path.startswith(folder):
            raise InvalidInput(
                f"file {f.path[:80]!r} is not in the checkpoint's folder {commit.path!r}; "
                "list the files inside it, relative to the job folder"
            )
        checked_sha256(f.sha256.lower())


async def commit_checkpoint(
    ctx: Context,
    worker: Worker,
    job_id: str,
    commit: CheckpointCommit,
    attempt_token: str | None = None,
) -> Checkpoint:
    """Record a checkpoint whose every file is stored for the attempt, under its name."""
    _check_commit(commit)
    attempt_tokens.check(ctx.audit_key, worker, commit.attempt_id, attempt_token)
    async with transaction(ctx) as tx:
        job = await live_node(tx.q, worker, job_id, commit.attempt_id, commit.node_rank, lock=True)
        _check_node(job, commit)
        stored = {a.path: a for a in await tx.q.checkpoint_files(commit.attempt_id, commit.name)}
        missing = [
            f.path
            for f in commit.files
            if (s := stored.get(f.path)) is None or (s.sha256, s.size) != (f.sha256.lower(), f.size)
        ]
        if missing:
            named = ", ".join(repr(p) for p in missing[:_MAX_NAMED])
            more = f" and {len(missing) - _MAX_NAMED} more" if len(missing) > _MAX_NAMED else ""
            raise InvalidInput(
                f"checkpoint {commit.name!r} is not stored whole: {named}{more} not stored "
                "with that size and sha256 as its files; upload them (kind 'checkpoint', "
                "this checkpoint's name), then commit again"
            )
        if commit.node_rank is None:
            checkpoint = await _insert(tx.q, job, commit, tx.now)
        else:
            checkpoint = await _insert_part(tx.q, job, commit, commit.node_rank, tx.now)
        tx.wake(job_topic(job.id))
    return checkpoint


def _check_node(job: Job, commit: CheckpointCommit) -> None:
    if job.nodes > 1 and commit.node_rank is None:
        raise InvalidInput(
            f"job {job.id} runs on {job.nodes} nodes: each commits its own part of a "
            "checkpoint; name yours with node_rank and store its files under node-<rank>/"
        )
    if job.nodes <= 1 and commit.node_rank is not None:
        raise InvalidInput(
            f"job {job.id} runs on one node: commit its checkpoint without node_rank"
        )


def _row(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "id": checkpoint.id,
        "job_id": checkpoint.job_id,
        "attempt_id": checkpoint.attempt_id,
        "name": checkpoint.name,
        "path": checkpoint.path,
        "step": checkpoint.step,
        "files": checkpoint.files,
        "size": checkpoint.size,
        "created_at": checkpoint.created_at,
    }


async def _insert(q: Queries, job: Job, commit: CheckpointCommit, now: datetime) -> Checkpoint:
    """A one-node job's checkpoint, replacing the attempt's of the same name."""
    attempt = await q.get_attempt(commit.attempt_id)
    checkpoint = Checkpoint(
        id=new_id("k"),
        job_id=job.id,
        attempt_id=commit.attempt_id,
        name=commit.name,
        path=commit.path,
        step=commit.step,
        files=len(commit.files),
        size=sum(f.size for f in commit.files),
        created_at=now,
        attempt_number=attempt.number if attempt else None,
    )
    await q.insert_checkpoint(_row(checkpoint))
    return checkpoint


async def _insert_part(
    q: Queries, job: Job, commit: CheckpointCommit, rank: int, now: datetime
) -> Checkpoint:
    """Node `rank`'s part of a gang's checkpoint: the checkpoint is written by its first
    node's commit; every node's names the same folder and step."""
    checkpoint = await q.checkpoint_named(commit.attempt_id, commit.name)
    if checkpoint is None:
        checkpoint = await _insert(q, job, commit, now)
    elif (checkpoint.path, checkpoint.step) != (commit.path, commit.step):
        raise InvalidInput(
            f"node {rank}'s checkpoint {commit.name!r} is {commit.path!r} at step "
            f"{commit.step}, the other nodes' is {checkpoint.path!r} at step {checkpoint.step}: "
            "every node writes a checkpoint of one name at the same path and step"
        )
    files, size = len(commit.files), sum(f.size for f in commit.files)
    await q.insert_checkpoint_node(
        {
            "checkpoint_id": checkpoint.id,
            "rank": rank,
            "files": files,
            "size": size,
            "created_at": now,
        }
    )
    return await q.get_checkpoint(checkpoint.id) or checkpoint


async def reading_attempt(
    ctx: Context,
    q: Queries,
    worker: Worker,
    job_id: str,
    attempt_id: str | None,
    attempt_token: str | None,
) -> str:
    """The attempt that reads the job's files (a checkpoint's, its workdir): its live one on
    this worker."""
    await offered_job(q, worker, job_id, node=True)
    if not attempt_id:
        raise InvalidInput("name the attempt that reads the files: ?attempt_id=<your attempt>")
    attempt_tokens.check(ctx.audit_key, worker, attempt_id, attempt_token)
    await live_job(q, worker, job_id, attempt_id, lock=False, node=True)
    return attempt_id


async def fetch_checkpoint(
    ctx: Context,
    worker: Worker,
    job_id: str,
    checkpoint_id: str,
    attempt_id: str | None,
    attempt_token: str | None = None,
) -> tuple[Checkpoint, list[FetchFile]]:
    """A checkpoint of the job and where its files download from, for the attempt that
    resumes from it (the job's live attempt on this worker)."""
    async with ctx.store.read() as q:
        attempt_id = await reading_attempt(ctx, q, worker, job_id, attempt_id, attempt_token)
        checkpoint = await q.get_checkpoint(checkpoint_id)
        if checkpoint is None or checkpoint.job_id != job_id:
            raise NotFound(f"job {job_id} has no checkpoint {checkpoint_id[:64]!r}")
        rank = await _reading_node(q, worker, job_id, attempt_id)
        files = await _part(q, checkpoint, rank)
    out = []
    for artifact, local in files:
        url = await ctx.artifacts.presign_get(artifact.key, FETCH_TTL)
        if url is None:
            path = protocol.job_artifact_path(job_id, artifact.id)
            url = f"{path}?{urlencode({'attempt_id': attempt_id})}"
        out.append(FetchFile(artifact, url, {}, local))
    return checkpoint, out


async def _reading_node(q: Queries, worker: Worker, job_id: str, attempt_id: str) -> int | None:
    """The rank of the worker's node in a gang's live attempt; None for a one-node job."""
    job = await q.get_job(job_id)
    if job is None or job.nodes <= 1:
        return None
    ranks = [n.rank for n in await q.attempt_nodes(attempt_id) if n.worker_id == worker.id]
    return min(ranks) if ranks else None


async def _part(q: Queries, checkpoint: Checkpoint, rank: int | None) -> list[tuple[Artifact, str]]:
    """The checkpoint's files a node puts in place, with their path in its job folder: a
    gang's node its own part (`node-K/`), a one-node job all of them."""
    prefix = "" if rank is None else node_path(rank, "")
    folder = prefix + checkpoint.path + "/"
    found = [
        (a, a.path[len(prefix) :])
        for a in await q.checkpoint_files(checkpoint.attempt_id, checkpoint.name)
        if a.path.startswith(folder)
    ]
    if not found and rank is not None:
        raise NotFound(
            f"checkpoint {checkpoint.name!r} holds no part of node {rank}; a gang resumes "
            "only from a checkpoint every node completed"
        )
    return found


async def download(
    ctx: Context,
    worker: Worker,
    job_id: str,
    artifact_id: str,
    attempt_id: str | None,
    attempt_token: str | None = None,
) -> tuple[Artifact, Path | AsyncIterator[bytes]]:
    """A stored file of the job (the data folder's file, else the store's stream), for the
    attempt that needs it (a resume), or one of a dependency's its `inputs` select
    (`job_inputs.may_take`)."""
    async with ctx.store.read() as q:
        await reading_attempt(ctx, q, worker, job_id, attempt_id, attempt_token)
        artifact = await q.get_artifact(artifact_id)
        job = await q.get_job(job_id) if artifact and artifact.job_id != job_id else None
    if artifact is None or (artifact.job_id != job_id and not (job and may_take(job, artifact))):
        raise NotFound(f"job {job_id} has no artifact {artifact_id[:64]!r}")
    file = await ctx.artifacts.file(artifact.key)  # the data folder's: served as it is
    return artifact, file if file is not None else await ctx.artifacts.open(artifact.key)
