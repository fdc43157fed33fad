"""Workdir snapshots (docs/jobs.md): the code a job brings, stored once by its sha256.

A client uploads the canonical archive of a folder (artifacts/workdir_archive.py) under its
digest; its bytes are spooled to the data folder while their size and sha256 are counted,
the archive is checked (no path or link leading out, no device file, no bomb), and only then
is it written to the artifact store at `workdirs/<hex>.tar`. A cut-off or wrong upload
stores nothing. Two uploads of one digest at once in this process store it once (the second
finds it stored); two replicas writing it at once write the same bytes to the same key, and
the store's put is atomic.

A job names its snapshot in its config (`"workdir": "sha256:<hex>"`); a submit naming one
that is not stored is refused. The worker its attempt runs on downloads it (fenced like a
checkpoint's files). A snapshot is kept while a job naming it is not ended, then as long as
the artifacts of a job that ended (`--artifact-retention-days`).
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
from gpufleet.artifacts.store import READ_CHUNK
from gpufleet.artifacts.workdir_archive import WORKDIR_PREFIX, check
from gpufleet.domain.jobspec import WORKDIR, workdir_of
from gpufleet.domain.records import Worker
from gpufleet.domain.retention import STAGING_MAX_AGE
from gpufleet.errors import ArtifactCorrupt, InvalidInput, NotFound, PayloadTooLarge
from gpufleet.server.context import Context, transaction
from gpufleet.server.services.checkpoints import reading_attempt

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


async def check_named(ctx: Context, config: dict[str, Any]) -> str | None:
    """The hex digest of the snapshot a config names, if it is stored; a submit naming one
    that is not is refused (422, naming it)."""
    hex_digest = workdir_of(config)
    if hex_digest is None:
        return None
    if await ctx.artifacts.stat(key_of(hex_digest)) is None:
        digest = f"{WORKDIR_PREFIX}{hex_digest}"
        raise InvalidInput(
            f"the config's workdir {digest} is not stored; upload it first "
            f"(PUT /api/workdirs/{digest}), then submit",
            cli=f"the job's workdir {digest} is not stored; `gpufleet run` uploads it",
        )
    return hex_digest


@dataclass(frozen=True, slots=True)
class Stored:
    snapshot: Snapshot
    created: bool  # False: it was stored already


async def upload(
    ctx: Context,
    digest: str,
    chunks: AsyncIterable[bytes],
    content_length: int | None,
    actor: str,
    client: str | None,
) -> Stored:
    """Store the archive streamed in `chunks` as snapshot `digest`, checked as it comes;
    audited once stored (`workdir.uploaded`)."""
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
        return Stored(found, False)
    spool = ctx.settings.data_dir / _SPOOL
    spool.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=spool, prefix="upload-")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            await _receive(chunks, out, hex_digest, content_length)
        await asyncio.to_thread(_check_archive, path, content_length)
        async with ctx.workdir_locks.hold(hex_digest):
            if (found := await find(ctx, digest)) is not None:
                return Stored(found, False)
            await ctx.artifacts.adopt(key_of(hex_digest), path, sha256=hex_digest)
    finally:
        await asyncio.to_thread(path.unlink, True)
    async with transaction(ctx) as tx:
        tx.audit("workdir.uploaded", actor, digest, client, size=content_length)
    return Stored(await get(ctx, digest), True)


async def _receive(chunks: AsyncIterable[bytes], out: BinaryIO, hex_digest: str, size: int) -> None:
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


async def _read(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, READ_CHUNK):
            yield chunk


async def _open(ctx: Context, key: str) -> AsyncIterator[bytes]:
    """The stored bytes at `key` (found by `get` just before): a folder store's file read
    straight, on a thread in large reads (obstore's stream of it was the slower half of a
    worker's download), else the store's stream."""
    path = ctx.artifacts.local_path(key)
    return _read(path) if path is not None else await ctx.artifacts.open(key)


async def open_for_attempt(
    ctx: Context,
    worker: Worker,
    job_id: str,
    attempt_id: str | None,
    attempt_token: str | None = None,
) -> tuple[Snapshot, AsyncIterator[bytes]]:
    """The snapshot the job names, streamed to its live attempt on this worker."""
    async with ctx.store.read() as q:
        await reading_attempt(ctx, q, worker, job_id, attempt_id, attempt_token)
        job = await q.get_job(job_id)
    if job is None or job.workdir is None:
        raise NotFound(f"job {job_id} names no workdir")
    snapshot = await get(ctx, f"{WORKDIR_PREFIX}{job.workdir}")
    return snapshot, await _open(ctx, key_of(job.workdir))


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
    doomed = [key for hex_digest, key in sorted(old.items()) if hex_digest not in held]
    for key in doomed:
        with contextlib.suppress(NotFound):
            await ctx.artifacts.delete(key)
    return doomed


def _clear_spool(spool: Path, now: datetime) -> None:
    if not spool.is_dir():
        return
    for path in spool.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if now.timestamp() - path.stat().st_mtime > STAGING_MAX_AGE.total_seconds():
                path.unlink()
