"""SimpleTuner's own uploads: the part of S3 its trainer speaks, on the artifact store.

The trainer's S3 provider (boto3) PUTs each file of its `output_dir` to
`/api/cloud/storage/<bucket>/<job id>/<rest>` and reads checkpoints back with HEAD and
(ranged) GET. It proves itself with the attempt's upload token (`X-SimpleTuner-Secret` or
`X-Upload-Token`, see `domain.publishing`), which is only good while that attempt is the
job's live one: a stale attempt's upload is refused like a stale report, and stores nothing.
A PUT lands as an artifact of the attempt at `output/<rest>`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from gpufleet.artifacts.keys import artifact_key, checked_path
from gpufleet.artifacts.store import StoredArtifact
from gpufleet.domain import publishing
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.records import Artifact, ArtifactKind, Attempt, Job
from gpufleet.domain.secrets import check_upload_token, new_id
from gpufleet.domain.states import ACTIVE_ATTEMPT
from gpufleet.errors import GpufleetError, NotFound, NotHolder, PayloadTooLarge, Unauthenticated
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import job_topic
from gpufleet.server.services import artifacts, auth

NO_TOKEN = (
    "this storage route takes the attempt's upload token in X-SimpleTuner-Secret or "
    "X-Upload-Token; use the publishing_config the job's offer carried"
)


@dataclass(frozen=True, slots=True)
class Uploader:
    """Whose token it was: the job, and the live attempt the token belongs to."""

    job: Job
    attempt: Attempt


async def authenticate(ctx: Context, key: str, token: str | None, client: str | None) -> Uploader:
    """The live attempt whose upload token this is, for the job the key names.

    401 for a missing or unknown token (an unknown job too: no hint which jobs exist; audited
    and rate-limited as any failed authentication), 409 for the token of an attempt that is
    no longer the job's live one."""
    job_id = publishing.job_of_key(key)
    if not token:
        await auth.upload_token_refused(ctx, client, "no upload token")
        raise Unauthenticated(NO_TOKEN)
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        attempts = await q.attempts_for_job(job_id) if job is not None else []
    owner: Attempt | None = None
    for attempt in attempts:  # every one compared, in constant time each
        if check_upload_token(ctx.audit_key, attempt.id, token):
            owner = attempt
    if job is None or owner is None:
        await auth.upload_token_refused(ctx, client, "invalid upload token")
        raise Unauthenticated(f"the upload token is not one of job {job_id}'s; {NO_TOKEN}")
    if owner.id != job.current_attempt_id or owner.status not in ACTIVE_ATTEMPT:
        raise NotHolder(
            f"attempt {owner.number} of job {job_id} is over ({owner.status.value}); its "
            "uploads are refused: only the job's live attempt may store files"
        )
    return Uploader(job, owner)


async def put(
    ctx: Context,
    who: Uploader,
    key: str,
    chunks: AsyncIterable[bytes],
    *,
    size: int | None,
    sha256: str | None,
) -> Artifact:
    """Store the body as the attempt's artifact at `output/<rest of key>`: within the job's
    size limit, listed only once its bytes are in place and verified, and only if the
    attempt is still the live one then (else the bytes go again, as the worker API's do)."""
    job, attempt = who.job, who.attempt
    path = checked_path(publishing.artifact_path(job.id, key))
    store_key = artifact_key(job.id, attempt.id, path)
    limit = ctx.settings.artifact_max_job_bytes
    async with ctx.store.read() as q:
        before = await q.artifact_at(attempt.id, path)
        held = await q.job_artifact_bytes(job.id) - (before.size if before else 0)
    try:
        if size is not None and held + size > limit:
            raise _over_limit(job.id, path, limit, held, size)
        stored = await ctx.artifacts.write(store_key, chunks, sha256=sha256, max_size=limit - held)
    except GpufleetError:
        ctx.metrics.artifact_upload_failures.inc()
        raise
    try:
        return await _record(ctx, who, path, stored)
    except GpufleetError:
        ctx.metrics.artifact_upload_failures.inc()
        await _discard(ctx, attempt.id, path, store_key)
        raise


async def _record(ctx: Context, who: Uploader, path: str, stored: StoredArtifact) -> Artifact:
    job, attempt = who.job, who.attempt
    limit = ctx.settings.artifact_max_job_bytes
    async with transaction(ctx) as tx:
        now = await tx.q.get_job(job.id, lock=True)
        live = await tx.q.get_attempt(attempt.id)
        if (
            now is None
            or live is None
            or now.current_attempt_id != attempt.id
            or (live.status not in ACTIVE_ATTEMPT)
        ):
            raise NotHolder(
                f"attempt {attempt.number} of job {job.id} ended while its upload of {path!r} "
                "arrived; nothing was listed"
            )
        before = await tx.q.artifact_at(attempt.id, path)
        held = await tx.q.job_artifact_bytes(job.id) - (before.size if before else 0)
        if held + stored.size > limit:
            raise _over_limit(job.id, path, limit, held, stored.size)
        artifact = Artifact(
            id=new_id("r"),
            job_id=job.id,
            attempt_id=attempt.id,
            path=path,
            kind=ArtifactKind.ARTIFACT,
            checkpoint=None,
            size=stored.size,
            sha256=stored.sha256,
            key=stored.key,
            created_at=tx.now,
            attempt_number=live.number,
        )
        await tx.q.insert_artifact(
            {f: getattr(artifact, f) for f in _COLUMNS} | {"kind": artifact.kind.value}
        )
        tx.audit(
            "artifact.created",
            worker_actor(attempt.worker_id),  # its trainer, by the attempt's upload token
            job.id,
            None,
            attempt_id=attempt.id,
            path=path,
            kind=artifact.kind.value,
            size=stored.size,
            sha256=stored.sha256,
            via="simpletuner",
        )
        tx.observe("artifact_bytes_uploaded", float(stored.size))
        tx.wake(job_topic(job.id))
    return artifact


_COLUMNS = (
    "id",
    "job_id",
    "attempt_id",
    "path",
    "checkpoint",
    "size",
    "sha256",
    "key",
    "created_at",
)


def _over_limit(job_id: str, path: str, limit: int, held: int, size: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{path!r} ({size} bytes) would take job {job_id} past its artifact limit of {limit} "
        f"bytes (it holds {held}); delete some of its artifacts or raise "
        "--artifact-max-job-bytes"
    )


async def _discard(ctx: Context, attempt_id: str, path: str, store_key: str) -> None:
    """Bytes stored but refused a row: removed, and any row of that key with them (an
    overwrite replaced the bytes it listed), so that what is listed is what is stored."""
    await ctx.artifacts.delete(store_key)
    async with transaction(ctx) as tx:
        before = await tx.q.artifact_at(attempt_id, path)
        if before is not None:
            await tx.q.delete_artifacts([before.id])


@dataclass(frozen=True, slots=True)
class Served:
    artifact: Artifact
    start: int
    end: int  # exclusive

    @property
    def etag(self) -> str:
        return f'"{self.artifact.sha256}"'


async def find(ctx: Context, who: Uploader, key: str) -> Artifact:
    """The newest artifact of the job at the path the key names."""
    path = publishing.artifact_path(who.job.id, key)
    async with ctx.store.read() as q:
        found = await q.artifacts_for_job(who.job.id)
    for art in found:  # newest attempt first
        if art.path == path:
            return art
    raise NotFound(f"no object {key!r}: job {who.job.id} stored nothing at {path!r}")


async def read(ctx: Context, served: Served) -> AsyncIterator[bytes]:
    """The served range of the artifact's bytes, counted as downloaded as they go."""
    art = served.artifact
    if (served.start, served.end) == (0, art.size):
        source = await ctx.artifacts.open(art.key)
    else:
        source = await ctx.artifacts.open_range(art.key, served.start, served.end)
    return artifacts.counted(ctx, source)
