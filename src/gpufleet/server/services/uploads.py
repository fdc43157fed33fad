"""A job's files coming home (docs/artifacts.md, Worker API): a worker announces a file,
sends its bytes (through the orchestrator, or to a presigned URL of the bucket), commits a
checkpoint whose files are stored, and fetches one to resume from.

Every call names its attempt and is fenced like a status report: only the job's current
attempt, on the worker that holds it, while it is active. A worker uploads its artifacts
after the job's process ended and before its final report, so the attempt is still running
then; after the final report the attempt is over and its uploads are refused.

Nothing is remembered between the calls: the `upload_id` is the announced upload itself,
signed with the server's key and dated, so any replica takes the bytes or the `complete`.
A row is written only after the bytes are in place and verified.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet import protocol
from gpufleet.artifacts.keys import artifact_key, checked_path
from gpufleet.artifacts.store import (
    PRESIGNED_PUT_MAX,
    PresignedUpload,
    StoredArtifact,
    checked_sha256,
)
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.node_checkpoints import split_node_path
from gpufleet.domain.records import Artifact, ArtifactKind, Job, Worker
from gpufleet.domain.secrets import new_id, open_ticket, sign_ticket
from gpufleet.errors import (
    ArtifactCorrupt,
    GpufleetError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import job_topic
from gpufleet.server.services import attempt_tokens
from gpufleet.server.services.job_fence import live_node, offered_job
from gpufleet.store import Queries

UPLOAD_TTL = timedelta(hours=12)  # an announced upload (and its presigned URL) lasts this long
_TICKET = "artifact-upload"


@dataclass(frozen=True, slots=True)
class Announce:
    attempt_id: str
    path: str
    size: int
    sha256: str
    kind: ArtifactKind = ArtifactKind.ARTIFACT
    checkpoint: str | None = None


@dataclass(frozen=True, slots=True)
class UploadPlan:
    upload_id: str
    url: str
    headers: dict[str, str]
    via: str  # "orchestrator" | "store"


@dataclass(frozen=True, slots=True)
class _Ticket:
    """An announced upload, as its `upload_id` carries it."""

    job_id: str
    file: Announce
    key: str
    staging_key: str | None  # set when the worker PUTs to the bucket itself
    expires: datetime


# ---- announce -----------------------------------------------------------------------------


def _checked(job_id: str, file: Announce, limit: int) -> tuple[Announce, str]:
    checked_path(file.path)
    if file.kind is ArtifactKind.CHECKPOINT:
        if file.checkpoint is None:
            raise InvalidInput("a checkpoint file needs `checkpoint`: its checkpoint's name")
        check_name(file.checkpoint)
    elif file.checkpoint is not None:
        raise InvalidInput("only a file of kind 'checkpoint' names a checkpoint; drop it")
    if file.size > limit:
        raise PayloadTooLarge(
            f"the file's {file.size} bytes are over the per-job artifact limit of {limit} "
            "bytes (--artifact-max-job-bytes); keep less or raise the limit"
        )
    sha = checked_sha256(file.sha256.lower())
    key = artifact_key(job_id, file.attempt_id, file.path)
    return Announce(file.attempt_id, file.path, file.size, sha, file.kind, file.checkpoint), key


async def _live(q: Queries, worker: Worker, job_id: str, file: Announce, *, lock: bool) -> Job:
    """The job, if the worker may store `file` for its live attempt: a checkpoint file under
    `node-K/` is node K's own (every node of a gang stores its part); any other, the
    attempt's worker's (a gang's node 0)."""
    part = split_node_path(file.path) if file.kind is ArtifactKind.CHECKPOINT else None
    return await live_node(
        q, worker, job_id, file.attempt_id, None if part is None else part[0], lock=lock
    )


def check_name(name: str) -> None:
    checked_path(name)
    if "/" in name:
        raise InvalidInput(f"checkpoint name {name[:80]!r} is a path; give the folder's name")


def _same(artifact: Artifact, file: Announce) -> bool:
    return (artifact.sha256, artifact.size, artifact.kind, artifact.checkpoint) == (
        file.sha256,
        file.size,
        file.kind,
        file.checkpoint,
    )


def _over_limit(limit: int, held: int, size: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the job's artifacts would take {held + size} bytes, over the per-job limit of "
        f"{limit} bytes (--artifact-max-job-bytes): the job holds {held} bytes and this "
        f"file is {size}; keep less or raise the limit"
    )


async def announce(
    ctx: Context, worker: Worker, job_id: str, file: Announce, attempt_token: str | None = None
) -> UploadPlan | Artifact:
    """Where to send the file's bytes; the stored artifact if it is there already."""
    limit = ctx.settings.artifact_max_job_bytes
    file, key = _checked(job_id, file, limit)
    attempt_tokens.check(ctx.audit_key, worker, file.attempt_id, attempt_token)
    async with ctx.store.read() as q:
        await _live(q, worker, job_id, file, lock=False)
        stored = await q.artifact_at(file.attempt_id, file.path)
        held = await q.job_artifact_bytes(job_id) - (stored.size if stored else 0)
    if stored is not None and _same(stored, file):
        return stored
    if held + file.size > limit:
        raise _over_limit(limit, held, file.size)
    expires = ctx.clock() + UPLOAD_TTL
    # One presigned PUT takes at most what the store takes in one request; a larger file
    # streams through the orchestrator, whose write to the store is a multipart upload.
    presigned = (
        await ctx.artifacts.presign_put(key, UPLOAD_TTL) if file.size <= PRESIGNED_PUT_MAX else None
    )
    staging = presigned.staging_key if presigned else None
    upload_id = sign_ticket(ctx.audit_key, _TICKET, _ticket_payload(job_id, file, staging, expires))
    if presigned is not None:
        return UploadPlan(upload_id, presigned.url, {}, "store")
    url = protocol.job_upload_send_path(job_id, upload_id)
    return UploadPlan(upload_id, url, {"Content-Type": "application/octet-stream"}, "orchestrator")


def _ticket_payload(
    job_id: str, file: Announce, staging: str | None, expires: datetime
) -> dict[str, Any]:
    return {
        "j": job_id,
        "a": file.attempt_id,
        "p": file.path,
        "s": file.size,
        "h": file.sha256,
        "k": file.kind.value,
        "c": file.checkpoint,
        "t": staging,
        "x": int(expires.timestamp()),
    }


def _ticket(ctx: Context, job_id: str, upload_id: str) -> _Ticket:
    payload = open_ticket(ctx.audit_key, _TICKET, upload_id)
    gone = NotFound(
        f"no upload {upload_id[:40]!r}… for job {job_id}; announce the file again "
        f"(POST {protocol.job_upload_path(job_id)})"
    )
    if payload is None or payload.get("j") != job_id:
        raise gone
    try:
        file = Announce(
            str(payload["a"]),
            str(payload["p"]),
            int(payload["s"]),
            str(payload["h"]),
            ArtifactKind(payload["k"]),
            payload["c"],
        )
        expires = datetime.fromtimestamp(int(payload["x"]), UTC)
        staging = payload["t"]
    except (KeyError, TypeError, ValueError):
        raise gone from None
    if expires < ctx.clock():
        raise NotFound(
            f"upload {upload_id[:40]!r}… expired at {expires.isoformat()}; announce the file again"
        )
    return _Ticket(job_id, file, artifact_key(job_id, file.attempt_id, file.path), staging, expires)


# ---- send, complete -----------------------------------------------------------------------


async def _live_ticket(
    ctx: Context, worker: Worker, job_id: str, upload_id: str, attempt_token: str | None
) -> _Ticket:
    """The announced upload, while its attempt is live on this worker."""
    async with ctx.store.read() as q:
        await offered_job(q, worker, job_id, node=True)
        ticket = _ticket(ctx, job_id, upload_id)
        attempt_tokens.check(ctx.audit_key, worker, ticket.file.attempt_id, attempt_token)
        await _live(q, worker, job_id, ticket.file, lock=False)
    return ticket


async def send(
    ctx: Context,
    worker: Worker,
    job_id: str,
    upload_id: str,
    chunks: AsyncIterable[bytes],
    content_length: int | None,
    attempt_token: str | None = None,
) -> Artifact:
    """Store the announced file's bytes as they stream in (`via: orchestrator`)."""
    ticket = await _live_ticket(ctx, worker, job_id, upload_id, attempt_token)
    file = ticket.file
    if ticket.staging_key is not None:
        raise InvalidInput("this upload goes to the artifact store: PUT it to the announced url")
    if content_length is not None and content_length != file.size:
        raise _failed(ctx, _wrong_size(file, content_length))
    try:
        stored = await ctx.artifacts.write(
            ticket.key, chunks, sha256=file.sha256, max_size=file.size
        )
    except PayloadTooLarge as exc:
        raise _failed(ctx, _wrong_size(file, None)) from exc
    except GpufleetError as exc:
        raise _failed(ctx, exc) from exc
    return await _record(ctx, worker, ticket, stored)


async def complete(
    ctx: Context, worker: Worker, job_id: str, upload_id: str, attempt_token: str | None = None
) -> Artifact:
    """Check the file the worker PUT to the bucket, and make it the artifact (`via: store`)."""
    ticket = await _live_ticket(ctx, worker, job_id, upload_id, attempt_token)
    file = ticket.file
    if ticket.staging_key is None:
        raise InvalidInput("this upload goes through the orchestrator: PUT it to the announced url")
    staged = PresignedUpload("", ticket.key, ticket.staging_key, ticket.expires)
    try:
        stored = await ctx.artifacts.finish_upload(staged, sha256=file.sha256, max_size=file.size)
    except NotFound as exc:
        raise _failed(
            ctx,
            InvalidInput(
                f"nothing was uploaded for {file.path!r} (or it was checked once already); "
                "PUT the file to the announced url, or announce it again"
            ),
        ) from exc
    except PayloadTooLarge as exc:
        raise _failed(ctx, _wrong_size(file, None)) from exc
    except GpufleetError as exc:
        raise _failed(ctx, exc) from exc
    return await _record(ctx, worker, ticket, stored)


def _wrong_size(file: Announce, got: int | None) -> ArtifactCorrupt:
    said = f"{got} bytes" if got is not None else "more bytes"
    return ArtifactCorrupt(
        f"the upload of {file.path!r} sent {said}, not the announced {file.size}; nothing "
        "was stored, upload it again"
    )


def _failed(ctx: Context, exc: GpufleetError) -> GpufleetError:
    ctx.metrics.artifact_upload_failures.inc()
    return exc


async def _record(
    ctx: Context, worker: Worker, ticket: _Ticket, stored: StoredArtifact
) -> Artifact:
    """The artifact's row, written once its bytes are verified, if the attempt is still live
    and the job within its limit; else the bytes go again and nothing is listed."""
    file = ticket.file
    limit = ctx.settings.artifact_max_job_bytes
    try:
        if stored.size != file.size:
            raise _wrong_size(file, stored.size)
        async with transaction(ctx) as tx:
            job = await _live(tx.q, worker, ticket.job_id, file, lock=True)
            before = await tx.q.artifact_at(file.attempt_id, file.path)
            held = await tx.q.job_artifact_bytes(job.id) - (before.size if before else 0)
            if held + file.size > limit:
                raise _over_limit(limit, held, file.size)
            attempt = await tx.q.get_attempt(file.attempt_id)
            artifact = Artifact(
                id=new_id("r"),
                job_id=job.id,
                attempt_id=file.attempt_id,
                path=file.path,
                kind=file.kind,
                checkpoint=file.checkpoint,
                size=stored.size,
                sha256=stored.sha256,
                key=stored.key,
                created_at=tx.now,
                attempt_number=attempt.number if attempt else None,
            )
            await tx.q.insert_artifact(_row(artifact))
            tx.audit(
                "artifact.created",
                worker_actor(worker.id),
                job.id,
                attempt_id=file.attempt_id,
                path=file.path,
                kind=file.kind.value,
                size=stored.size,
                sha256=stored.sha256,
            )
            tx.observe("artifact_bytes_uploaded", float(stored.size))
            tx.wake(job_topic(job.id))
    except GpufleetError as exc:
        await _discard(ctx, ticket)
        raise _failed(ctx, exc) from exc
    return artifact


def _row(a: Artifact) -> dict[str, Any]:
    return {
        "id": a.id,
        "job_id": a.job_id,
        "attempt_id": a.attempt_id,
        "path": a.path,
        "kind": a.kind.value,
        "checkpoint": a.checkpoint,
        "size": a.size,
        "sha256": a.sha256,
        "key": a.key,
        "created_at": a.created_at,
    }


async def _discard(ctx: Context, ticket: _Ticket) -> None:
    """Bytes stored but refused a row: removed, and with them any row of that key (an
    overwrite replaced the bytes it listed), so that what is listed is what is stored."""
    await ctx.artifacts.delete(ticket.key)
    async with transaction(ctx) as tx:
        before = await tx.q.artifact_at(ticket.file.attempt_id, ticket.file.path)
        if before is not None:
            await tx.q.delete_artifacts([before.id])
