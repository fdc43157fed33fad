"""SimpleTuner's own uploads: the part of S3 its trainer speaks, on the artifact store.

The trainer's S3 provider (boto3) PUTs each file of its `output_dir` to
`/api/cloud/storage/<bucket>/<job id>/<rest>` and reads checkpoints back with HEAD and
(ranged) GET. It proves itself with the attempt's upload token (`X-SimpleTuner-Secret` or
`X-Upload-Token`, see `domain.publishing`), which is only good while that attempt is the
job's live one: a stale attempt's upload is refused like a stale report, and stores nothing.
A PUT lands as an artifact of the attempt at `output/<rest>`.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from gpufleet.artifacts.keys import artifact_key, checked_path
from gpufleet.domain import publishing
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.records import Artifact, ArtifactKind, Attempt, Job
from gpufleet.domain.secrets import new_id, upload_token
from gpufleet.domain.states import ACTIVE_ATTEMPT
from gpufleet.errors import NotFound, NotHolder, PayloadTooLarge, Unauthenticated
from gpufleet.server.context import Context, transaction

NO_TOKEN = (
    "this storage route takes the attempt's upload token in X-SimpleTuner-Secret or "
    "X-Upload-Token; use the publishing_config the job's offer carried"
)


@dataclass(frozen=True, slots=True)
class Uploader:
    """Whose token it was: the job, and the live attempt the token belongs to."""

    job: Job
    attempt: Attempt


async def authenticate(ctx: Context, key: str, token: str | None) -> Uploader:
    """The live attempt whose upload token this is, for the job the key names.

    401 for a missing or unknown token (an unknown job too: no hint which jobs exist),
    409 for the token of an attempt that is no longer the job's live one."""
    if not token:
        raise Unauthenticated(NO_TOKEN)
    job_id = publishing.job_of_key(key)
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        attempts = await q.attempts_for_job(job_id) if job is not None else []
    presented = token.encode()
    owner: Attempt | None = None
    for attempt in attempts:  # every one compared, in constant time each
        if hmac.compare_digest(upload_token(ctx.audit_key, attempt.id).encode(), presented):
            owner = attempt
    if job is None or owner is None:
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
    attempt is still the live one then."""
    job, attempt = who.job, who.attempt
    path = checked_path(publishing.artifact_path(job.id, key))
    store_key = artifact_key(job.id, attempt.id, path)
    async with ctx.store.read() as q:
        total = await q.job_artifact_bytes(job.id)
        existing = await q.artifact_at(attempt.id, path)
    limit = ctx.settings.artifact_max_job_bytes
    room = limit - total + (existing.size if existing else 0)
    if size is not None and size > room:
        raise PayloadTooLarge(
            f"{path!r} ({size} bytes) would take job {job.id} past its artifact limit of "
            f"{limit} bytes (it holds {total}); delete some of its artifacts or raise "
            "--artifact-max-job-bytes"
        )
    stored = await ctx.artifacts.write(store_key, chunks, sha256=sha256, max_size=room)
    async with transaction(ctx) as tx:
        now = await tx.q.get_job(job.id, lock=True)
        live = await tx.q.get_attempt(attempt.id)
        if (
            now is None
            or live is None
            or now.current_attempt_id != attempt.id
            or live.status not in ACTIVE_ATTEMPT
        ):
            fenced = True
        else:
            fenced = False
            artifact_id = new_id("r")
            await tx.q.insert_artifact(
                {
                    "id": artifact_id,
                    "job_id": job.id,
                    "attempt_id": attempt.id,
                    "path": path,
                    "kind": ArtifactKind.ARTIFACT.value,
                    "checkpoint": None,
                    "size": stored.size,
                    "sha256": stored.sha256,
                    "key": store_key,
                    "created_at": tx.now,
                }
            )
            tx.audit(
                "artifact.created",
                worker_actor(attempt.worker_id),  # its trainer, by the attempt's token
                job.id,
                None,
                attempt_id=attempt.id,
                path=path,
                size=stored.size,
                sha256=stored.sha256,
                via="simpletuner",
            )
    if fenced:
        if existing is None:  # an overwrite's bytes are the row's now; a new file's are not
            await ctx.artifacts.delete(store_key)
        raise NotHolder(
            f"attempt {attempt.number} of job {job.id} ended while its upload of {path!r} "
            "arrived; nothing was listed"
        )
    async with ctx.store.read() as q:
        created = await q.get_artifact(artifact_id)
    if created is None:
        raise NotFound(f"artifact {path!r} of job {job.id} was deleted as it was stored")
    return created


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
    return _counted(ctx, source)


async def _counted(ctx: Context, source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for chunk in source:
        ctx.metrics.artifact_bytes_downloaded.inc(len(chunk))
        yield chunk
