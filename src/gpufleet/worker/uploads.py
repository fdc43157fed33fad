"""Send an attempt's files to the orchestrator's artifact store (docs/artifacts.md).

For each file: its size and sha256 (read in a thread, streaming), the announcement
(`POST …/upload`), the bytes (`PUT` to the answer's URL: a presigned store URL without the
worker's token, or the orchestrator's path with it), streamed from disk under the bandwidth
cap, and for `via: store` the completion. A checkpoint is committed once its every file is
stored.

    Unreachable, 5xx      retried with backoff (the file is read again from its start)
    Fenced (409)          the attempt is no longer ours: nothing more is sent for it
    Rejected (other 4xx)  that file failed: logged, counted, named in the final report;
                          a 404 or 501 (an orchestrator without the artifact routes, or a
                          deleted job) ends the attempt's uploads
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpufleet.artifacts.keys import checked_path
from gpufleet.domain.node_checkpoints import node_path
from gpufleet.errors import AgentError, UnsafeArtifactPath
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.errors import Fenced, Rejected, Unreachable
from gpufleet.worker.keep import open_inside

log = logging.getLogger(__name__)

Json = dict[str, Any]
CHUNK = 1024 * 1024
# An upload that keeps failing to reach anyone gives up after this many tries: the job's
# report must not wait forever behind a store that is down.
MAX_TRIES = 8
_NO_UPLOADS = frozenset({404, 501})


class Transfers(Protocol):
    """The orchestrator calls an upload makes (`OrchestratorClient`)."""

    async def announce_upload(self, job_id: str, body: Json) -> Json: ...

    async def put_file(
        self, url: str, headers: dict[str, str], body: AsyncIterator[bytes], size: int
    ) -> Json: ...

    async def complete_upload(self, job_id: str, upload_id: str) -> Json: ...

    async def commit_checkpoint(self, job_id: str, body: Json) -> Json: ...


class BandwidthLimiter:
    """A token bucket of `rate` bytes a second (0: unlimited), holding at most one second's
    worth, so that a pause is not followed by a burst past the cap."""

    def __init__(
        self,
        rate: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(rate)
        self._last = clock()
        self._lock = asyncio.Lock()

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes may be sent."""
        if self.rate <= 0 or size <= 0:
            return
        async with self._lock:  # uploads share the cap: one waits its turn behind another
            now = self._clock()
            self._tokens = min(float(self.rate), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= size
            if self._tokens < 0:
                await self._sleep(-self._tokens / self.rate)


@dataclass(frozen=True)
class FileDigest:
    path: str  # relative to the job folder, POSIX
    size: int
    sha256: str


def digest(folder: Path, path: str) -> FileDigest:
    """Size and sha256 of `folder/path`, read in chunks (call it in a thread)."""
    sha, size = hashlib.sha256(), 0
    with open_inside(folder, folder / path) as file:
        while chunk := file.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return FileDigest(path, size, sha.hexdigest())


async def read_chunks(
    folder: Path, file_path: Path, size: int, limiter: BandwidthLimiter
) -> AsyncIterator[bytes]:
    """The first `size` bytes of the file (inside `folder`), chunk by chunk, under the
    bandwidth cap."""
    left = size
    with open_inside(folder, file_path) as file:
        while left > 0:
            chunk = await asyncio.to_thread(file.read, min(CHUNK, left))
            if not chunk:
                break  # shrunk since it was hashed: the store refuses the short body
            left -= len(chunk)
            await limiter.acquire(len(chunk))
            yield chunk


class UploadFailed(AgentError):
    """One file could not be stored; the attempt goes on."""


class Uploader:
    """The uploads of one attempt. Not safe for two concurrent callers: the attempt's
    checkpoint queue and its final artifacts go through one at a time."""

    def __init__(
        self,
        job_id: str,
        attempt_id: str,
        folder: Path,
        transfers: Transfers,
        limiter: BandwidthLimiter,
        backoff: Callable[[], Backoff],
    ) -> None:
        self._job_id = job_id
        self._attempt_id = attempt_id
        self._folder = folder
        self._transfers = transfers
        self._limiter = limiter
        self._backoff = backoff
        self.fenced: Fenced | None = None
        self.unsupported: str | None = None  # why the orchestrator takes no upload at all
        # A multi-node job's node: its checkpoint files are stored under node-K/ and its
        # commits name it (domain/node_checkpoints.py); only node 0 sends other files.
        self.node_rank: int | None = None
        self.failures: list[str] = []
        self.stored: dict[str, FileDigest] = {}  # path → what was stored for this attempt
        # Files stored already (by the attempt this one resumed from): skipped if unchanged.
        self.known: dict[str, FileDigest] = {}
        self.bytes_sent = 0

    def summary(self) -> str | None:
        """What failed, for the final report's error; None when nothing did."""
        if not self.failures:
            return None
        shown = "; ".join(self.failures[:5])
        more = f" (and {len(self.failures) - 5} more)" if len(self.failures) > 5 else ""
        return f"{len(self.failures)} upload(s) failed: {shown}{more}"

    async def upload(
        self, path: str, *, kind: str = "artifact", checkpoint: str | None = None
    ) -> FileDigest | None:
        """Store one file; None when it failed (recorded). Raises `Fenced` (and remembers it)."""
        if self.fenced is not None:
            raise self.fenced
        if self.unsupported is not None or (kind != "checkpoint" and (self.node_rank or 0) > 0):
            return None
        try:  # the orchestrator would refuse it: say so here, and send nothing
            checked_path(path)
        except UnsafeArtifactPath as exc:
            self._failed(path, exc.message)
            return None
        try:
            file = await asyncio.to_thread(digest, self._folder, path)
        except OSError as exc:
            self._failed(path, f"cannot read it: {exc.strerror or exc}")
            return None
        if self.known.get(path) == file:
            log.debug("not uploading %s: stored already by an earlier attempt", path)
            return file
        body = {
            "attempt_id": self._attempt_id,
            "path": self._stored_as(path) if kind == "checkpoint" else path,
            "size": file.size,
            "sha256": file.sha256,
            "kind": kind,
            "checkpoint": checkpoint,
        }
        try:
            await self._retried(path, lambda: self._send(file, body))
        except Fenced as exc:
            self.fenced = exc
            log.warning("uploads of %s stop: %s", self._attempt_id, exc.message)
            raise
        except Rejected as exc:
            if exc.status_code in _NO_UPLOADS:
                self.unsupported = exc.message
                self._failed(path, f"{exc.message}; no further file of this attempt is sent")
            else:
                self._failed(path, exc.message)
            return None
        except (Unreachable, UploadFailed) as exc:
            self._failed(path, exc.message)
            return None
        except OSError as exc:  # gone or unreadable since it was hashed (a rotated checkpoint)
            self._failed(path, f"cannot read it: {exc.strerror or exc}")
            return None
        self.stored[path] = file
        self.bytes_sent += file.size
        log.info("uploaded %s (%d bytes)", path, file.size)
        return file

    async def commit_checkpoint(
        self, name: str, path: str, step: int | None, files: list[FileDigest]
    ) -> bool:
        """Commit a checkpoint whose files are stored; False when the orchestrator refused."""
        if self.fenced is not None:
            raise self.fenced
        body = {
            "attempt_id": self._attempt_id,
            "name": name,
            "path": path,
            "step": step,
            "files": [
                {"path": self._stored_as(f.path), "size": f.size, "sha256": f.sha256} for f in files
            ],
        }
        if self.node_rank is not None:
            body["node_rank"] = self.node_rank
        try:
            await self._retried(path, lambda: self._transfers.commit_checkpoint(self._job_id, body))
        except Fenced as exc:
            self.fenced = exc
            raise
        except (Rejected, Unreachable) as exc:
            self._failed(path, f"checkpoint not committed: {exc.message}")
            return False
        log.info("committed checkpoint %s (%d files)", path, len(files))
        return True

    def _stored_as(self, path: str) -> str:
        """Where a checkpoint's file at `path` is stored: under node-K/ for a gang's node."""
        return path if self.node_rank is None else node_path(self.node_rank, path)

    async def _send(self, file: FileDigest, body: Json) -> None:
        answer = await self._transfers.announce_upload(self._job_id, body)
        if answer.get("exists") is True:
            # Stored already with this size and sha256: a retry of a send whose answer was
            # lost, or a file the attempt left unchanged. Nothing to send.
            return
        upload_id, url = answer.get("upload_id"), answer.get("url")
        headers = answer.get("headers") or {}
        if not isinstance(upload_id, str) or not isinstance(url, str):
            raise UploadFailed(f"the orchestrator's upload answer names no upload: {answer!r:.200}")
        if not url.startswith(("/", "http://", "https://")):  # a path on it, or a store's URL
            raise UploadFailed(f"the orchestrator's upload URL {url[:200]!r} is neither")
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise UploadFailed(
                f"the orchestrator's upload headers are not strings: {headers!r:.200}"
            )
        chunks = read_chunks(self._folder, self._folder / file.path, file.size, self._limiter)
        await self._transfers.put_file(url, headers, chunks, file.size)
        if answer.get("via") == "store":
            await self._transfers.complete_upload(self._job_id, upload_id)

    async def _retried(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        backoff = self._backoff()
        for tries in range(1, MAX_TRIES + 1):
            try:
                await call()
                return
            except Unreachable as exc:
                if tries == MAX_TRIES:
                    raise
                delay = backoff.next()
                log.info("upload of %s waits %.1f s: %s", what, delay, exc.message)
                await asyncio.sleep(delay)

    def _failed(self, path: str, why: str) -> None:
        log.error("upload of %s failed: %s", path, why)
        self.failures.append(f"{path}: {why}")
