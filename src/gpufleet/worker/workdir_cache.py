"""The workdir snapshots this worker keeps (docs/jobs.md), and a fresh copy for each attempt.

A job whose config names a `workdir` gets the snapshot's files unpacked in its folder before
its command starts. The archive is downloaded once (`GET …/job/{id}/workdir`, streamed to a
`.part` file, its sha256 checked against the digest, then renamed into place) and kept in
`<work-dir>/cache/workdirs/<hex>.tar`; each attempt unpacks its own copy of it, checked again
as it is (artifacts/workdir_archive.py), so what a job writes never reaches the cache or
another job. The cache holds at most `--cache-size` bytes: the snapshots used least recently
(a use touches the file's mtime) go first; the one being used stays, even alone over the
bound.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from gpufleet import protocol
from gpufleet.artifacts.spool import HashingWriter
from gpufleet.artifacts.workdir_archive import unpack
from gpufleet.errors import AgentError, UnsafeArchive
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.resume import Downloads, ResumeFailed, retried

log = logging.getLogger(__name__)

CACHE_FOLDER = Path("cache") / "workdirs"


class WorkdirFailed(AgentError):
    """The snapshot could not be fetched or unpacked; the attempt does not start."""


class WorkdirCache:
    def __init__(self, work_dir: Path, max_bytes: int) -> None:
        self.folder = work_dir / CACHE_FOLDER
        self.max_bytes = max_bytes
        # One download at a time: two jobs of one snapshot share it (an agent runs one job at
        # a time; this guards a cache shared by the runs of one process all the same).
        self._lock = asyncio.Lock()

    async def put_in(
        self,
        folder: Path,
        hex_digest: str,
        *,
        downloads: Downloads,
        job_id: str,
        attempt_id: str,
        backoff: Callable[[], Backoff],
    ) -> int:
        """Unpack snapshot `hex_digest` into `folder`, downloading it first unless it is
        cached; the number of entries unpacked."""
        began = time.monotonic()
        async with self._lock:
            archive = self.folder / f"{hex_digest}.tar"
            if archive.is_file():
                os.utime(archive)  # used now: the last to go
            else:
                await retried(
                    backoff,
                    functools.partial(
                        self._download, downloads, job_id, attempt_id, hex_digest, archive
                    ),
                    f"workdir sha256:{hex_digest[:12]}… could not be downloaded",
                )
            await asyncio.to_thread(self._evict, keep=archive)
        fetched = time.monotonic()
        try:
            entries = await asyncio.to_thread(unpack, archive, folder)
        except (UnsafeArchive, OSError) as exc:
            raise WorkdirFailed(f"the workdir could not be unpacked: {exc}") from exc
        log.info(
            "job %s: unpacked workdir %s (%d entries; %.2f s to fetch or find, %.2f s to unpack)",
            job_id,
            hex_digest[:12],
            len(entries),
            fetched - began,
            time.monotonic() - fetched,
        )
        return len(entries)

    async def _download(
        self, downloads: Downloads, job_id: str, attempt_id: str, hex_digest: str, archive: Path
    ) -> dict[str, str]:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f".{archive.name}.{os.getpid()}.part")
        url = f"{protocol.job_workdir_path(job_id)}?{urlencode({'attempt_id': attempt_id})}"
        try:
            async with downloads.download(url, {}) as response:
                with partial.open("wb") as out:
                    spool = HashingWriter(out)
                    try:
                        async for chunk in response.aiter_bytes():
                            await spool.write(chunk)
                        sha256 = await spool.close()
                    finally:
                        await spool.settle()
            if sha256 != hex_digest:
                raise ResumeFailed(f"the workdir downloaded has sha256 {sha256}, not {hex_digest}")
            partial.replace(archive)
        finally:
            partial.unlink(missing_ok=True)
        return {}

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used snapshots until the cache fits its bound."""
        held = []
        for path in self.folder.glob("*.tar"):
            try:
                held.append((path.stat().st_mtime, path.stat().st_size, path))
            except FileNotFoundError:
                continue
        total = sum(size for _, size, _ in held)
        for _, size, path in sorted(held):
            if total <= self.max_bytes:
                return
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size
            log.info("workdir cache: removed %s (least recently used)", path.name)
