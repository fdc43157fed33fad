"""Workdir snapshots (docs/jobs.md): the code a job brings, stored once by its sha256.

A client uploads the canonical archive of a folder (artifacts/workdir_archive.py) under its
digest; its bytes are spooled to the data folder while their size and sha256 are counted,
the archive is checked (no path or link leading out, no device file, no bomb), and only then
is it written to the artifact store at `workdirs/<hex>.tar`. A cut-off or wrong upload
stores nothing. Two uploads of one digest at once in this process store it once (the second
finds it stored); two replicas writing it at once write the same bytes to the same key, and
the store's put is atomic.

Knowing a digest proves nothing (every job's config shows it), so a snapshot has holders
(domain/workdir_access.py): the users whose upload of its bytes was checked, and the teams a
job of theirs naming it was for. Only they and admins may name it in a job or learn that it
is stored; an upload of a stored snapshot by anyone else reads and checks every byte before
they hold it (only a holder may skip the body).

A job names its snapshot in its config (`"workdir": "sha256:<hex>"`); a submit naming one
the submitter may not name, or one that is not stored, is refused; a job for a team shares
it with that team. The worker its attempt runs on downloads it (fenced like a checkpoint's
files). A snapshot is kept while a job naming it is not ended, then as long as the artifacts
of a job that ended (`--artifact-retention-days`); its holders are forgotten with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from gpufleet.artifacts.spool import HashingWriter
from gpufleet.artifacts.workdir_archive import WORKDIR_PREFIX, check
from gpufleet.domain.jobspec import WORKDIR, workdir_of
from gpufleet.domain.levels import Level
from gpufleet.domain.ownership import Actor, Refused
from gpufleet.domain.records import Worker
from gpufleet.domain.retention import STAGING_MAX_AGE
from gpufleet.domain.workdir_access import Holding, holds, may_name
from gpufleet.errors import ArtifactCorrupt, Forbidden, InvalidInput, NotFound, PayloadTooLarge
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.services.checkpoints import reading_attempt
from gpufleet.server.services.ownership import actor_of
from gpufleet.store.queries import Queries

PREFIX = "workdirs"
_SPOOL = "incoming-workdirs"  # in the data folder: uploads being checked


@dataclass(frozen=True, slots=True)
class Snapshot:
    digest: str  # sha256:<hex>
    size: int
    stored_at: datetime


def key_of(hex_digest: str) -> str:
    return f"{PREFIX}/{hex_digest}.tar"


def parse_digest(value: str) -> str:
    """The hex digits of a digest written `sha256:<hex>`; `InvalidInput` otherwise."""
    if not WORKDIR.fullmatch(value):
        raise InvalidInput(
            f"workdir digest {value[:100]!r} is not 'sha256:' and 64 lowercase hex digits; "
            "name the snapshot by the sha256 of its archive"
        )
    return value.removeprefix(WORKDIR_PREFIX)


async def find(ctx: Context, digest: str) -> Snapshot | None:
    hex_digest = parse_digest(digest)
    info = await ctx.artifacts.stat(key_of(hex_digest))
    return None if info is None else Snapshot(digest, info.size, info.modified)


async def get(ctx: Context, digest: str) -> Snapshot:
    found = await find(ctx, digest)
    if found is None:
        raise NotFound(
            f"no workdir snapshot {digest} is stored; upload it (PUT /api/workdirs/{digest})",
            cli=f"no workdir snapshot {digest} is stored; `gpufleet run` uploads it",
        )
    return found


async def _actor(q: Queries, user_id: str) -> Actor:
    user = await q.get_user(user_id)
    return Actor(user_id, Level.VIEWER, frozenset()) if user is None else await actor_of(q, user)


async def _standing(ctx: Context, user_id: str, hex_digest: str) -> tuple[Actor, list[Holding]]:
    """The user as an `Actor`, and the snapshot's holders."""
    async with ctx.store.read() as q:
        return await _actor(q, user_id), await q.workdir_holdings(hex_digest)


async def get_for(ctx: Context, user_id: str, digest: str) -> Snapshot:
    """The stored snapshot, for a user who may name it; to anyone else, 404 as if it were
    not stored (so whether it is says nothing to those who do not have its files)."""
    hex_digest = parse_digest(digest)
    actor, holdings = await _standing(ctx, user_id, hex_digest)
    found = None if isinstance(may_name(actor, holdings), Refused) else await find(ctx, digest)
    if found is None:
        raise NotFound(
            f"you hold no workdir snapshot {digest}: it is not stored, or you have not "
            f"uploaded it; upload it (PUT /api/workdirs/{digest} with its bytes)",
            cli=f"you hold no workdir snapshot {digest}; `gpufleet run` uploads it",
        )
    return found


async def check_named(ctx: Context, config: dict[str, Any], user_id: str) -> str | None:
    """The hex digest of the snapshot a config names, if its submitter may name it (403,
    naming it) and it is stored (422)."""
    hex_digest = workdir_of(config)
    if hex_digest is None:
        return None
    digest = f"{WORKDIR_PREFIX}{hex_digest}"
    decision = may_name(*await _standing(ctx, user_id, hex_digest))
    if isinstance(decision, Refused):
        raise Forbidden(
            f"you may not name the workdir snapshot {digest} in a job: {decision.reason}",
            cli=f"you may not name the workdir snapshot {digest}: upload the folder with "
            "`gpufleet run`, which sends its files",
        )
    if await ctx.artifacts.stat(key_of(hex_digest)) is None:
        raise InvalidInput(
            f"the config's workdir {digest} is not stored; upload it first "
            f"(PUT /api/workdirs/{digest}), then submit",
            cli=f"the job's workdir {digest} is not stored; `gpufleet run` uploads it",
        )
    return hex_digest


async def share(tx: Tx, hex_digest: str, user_id: str, team_id: str) -> None:
    """A job naming the snapshot is for `team_id`: its members may name it too."""
    await tx.q.hold_workdir(hex_digest, user_id, team_id, tx.now)


@dataclass(frozen=True, slots=True)
class Stored:
    snapshot: Snapshot
    created: bool  # False: it was stored already
    read: bool = True  # False: the caller held it already, and its bytes were not read


async def upload(
    ctx: Context,
    digest: str,
    chunks: AsyncIterable[bytes],
    content_length: int | None,
    actor: str,
    client: str | None,
    *,
    user_id: str,
) -> Stored:
    """Store the archive streamed in `chunks` as snapshot `digest`, checked as it comes, and
    make `user_id` a holder of it; audited once stored (`workdir.uploaded`), or once a
    stored one's bytes made a new holder (`workdir.held`). A holder's upload of a stored
    snapshot reads nothing."""
    hex_digest = parse_digest(digest)
    limit = ctx.settings.workdir_max_bytes
    if content_length is None:
        raise InvalidInput("send the archive's size in Content-Length; nothing was stored")
    if content_length > limit:
        raise PayloadTooLarge(
            f"the snapshot's {content_length} bytes are over the orchestrator's limit of "
            f"{limit} bytes (--workdir-max-bytes); leave large files out (.gpufleetignore)",
            cli=f"the workdir's archive ({content_length} bytes) is over the {limit} bytes the "
            "orchestrator takes (its --workdir-max-bytes); leave large files out in "
            ".gpufleetignore",
        )
    if (found := await find(ctx, digest)) is not None:
        async with ctx.store.read() as q:
            if holds(user_id, await q.workdir_holdings(hex_digest)):
                return Stored(found, False, read=False)
        await _receive(chunks, None, hex_digest, content_length)  # the proof they have it
        await _hold(ctx, digest, user_id, actor, client, created=False, size=content_length)
        return Stored(found, False)
    created = await _store(ctx, hex_digest, chunks, content_length)
    await _hold(ctx, digest, user_id, actor, client, created=created, size=content_length)
    return Stored(await get(ctx, digest), created)


async def _store(
    ctx: Context, hex_digest: str, chunks: AsyncIterable[bytes], content_length: int
) -> bool:
    """Spool, check and store the archive; False when another upload stored it meanwhile."""
    spool = ctx.settings.data_dir / _SPOOL
    spool.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=spool, prefix="upload-")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            await _receive(chunks, out, hex_digest, content_length)
        await asyncio.to_thread(_check_archive, path, content_length)
        async with ctx.workdir_locks.hold(hex_digest):
            if await ctx.artifacts.stat(key_of(hex_digest)) is not None:
                return False
            await ctx.artifacts.adopt(key_of(hex_digest), path, sha256=hex_digest)
            return True
    finally:
        await asyncio.to_thread(path.unlink, True)


async def _hold(
    ctx: Context,
    digest: str,
    user_id: str,
    actor: str,
    client: str | None,
    *,
    created: bool,
    size: int,
) -> None:
    async with transaction(ctx) as tx:
        new = await tx.q.hold_workdir(digest.removeprefix(WORKDIR_PREFIX), user_id, None, tx.now)
        if created:
            tx.audit("workdir.uploaded", actor, digest, client, size=size)
        elif new:
            tx.audit("workdir.held", actor, digest, client, size=size)


async def _receive(
    chunks: AsyncIterable[bytes], out: BinaryIO | None, hex_digest: str, size: int
) -> None:
    """Read the upload to its end (into `out` unless None), refused unless its size and
    sha256 are the announced ones."""
    spool = HashingWriter(out)
    try:
        async for chunk in chunks:
            if spool.size + len(chunk) > size:
                raise ArtifactCorrupt(
                    f"the upload sent more than its Content-Length of {size} bytes; nothing was "
                    "stored"
                )
            await spool.write(chunk)
        sha256 = await spool.close()
    finally:
        await spool.settle()  # the file is closed next: no write may be left running
    if spool.size != size:
        raise ArtifactCorrupt(
            f"the upload was cut off at {spool.size} of {size} bytes; nothing was stored, send "
            "it again"
        )
    if sha256 != hex_digest:
        raise ArtifactCorrupt(
            f"the archive's sha256 is {sha256}, not the {hex_digest} it was uploaded as; "
            "nothing was stored"
        )


def _check_archive(path: Path, size: int) -> None:
    with path.open("rb") as archive:
        check(archive, size)


async def open_for_attempt(
    ctx: Context,
    worker: Worker,
    job_id: str,
    attempt_id: str | None,
    attempt_token: str | None = None,
) -> tuple[Snapshot, Path | AsyncIterator[bytes]]:
    """The snapshot the job names, its file or its stream, for its live attempt on this
    worker."""
    async with ctx.store.read() as q:
        await reading_attempt(ctx, q, worker, job_id, attempt_id, attempt_token)
        job = await q.get_job(job_id)
    if job is None or job.workdir is None:
        raise NotFound(f"job {job_id} names no workdir")
    snapshot = await get(ctx, f"{WORKDIR_PREFIX}{job.workdir}")
    file = await ctx.artifacts.file(key_of(job.workdir))  # the data folder's: served as it is
    return snapshot, file if file is not None else await ctx.artifacts.open(key_of(job.workdir))


async def sweep(ctx: Context, cutoff: datetime | None) -> list[str]:
    """Delete the snapshots stored before `cutoff` that no job holds (one not ended, or
    ended after `cutoff`); the keys deleted. None: keep them all. Spooled uploads a stopped
    orchestrator left behind go after a day."""
    await asyncio.to_thread(_clear_spool, ctx.settings.data_dir / _SPOOL, ctx.clock())
    if cutoff is None:
        return []
    old = {
        found.key.removeprefix(f"{PREFIX}/").removesuffix(".tar"): found.key
        for found in await ctx.artifacts.list(PREFIX)
        if found.modified < cutoff
    }
    async with ctx.store.read() as q:
        held = await q.workdirs_held(list(old), cutoff)
    doomed = {hex_digest: key for hex_digest, key in sorted(old.items()) if hex_digest not in held}
    began = ctx.clock()
    for key in doomed.values():
        with contextlib.suppress(NotFound):
            await ctx.artifacts.delete(key)
    if doomed:
        async with transaction(ctx) as tx:
            await tx.q.forget_workdirs(doomed, began)
    return list(doomed.values())


def _clear_spool(spool: Path, now: datetime) -> None:
    if not spool.is_dir():
        return
    for path in spool.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if now.timestamp() - path.stat().st_mtime > STAGING_MAX_AGE.total_seconds():
                path.unlink()
