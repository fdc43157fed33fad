"""Put the checkpoint an attempt resumes from into its job folder (docs/artifacts.md).

The offer's `resume` names a committed checkpoint of an earlier attempt. Before the process
starts, the worker fetches its file list (`GET …/checkpoints/{id}?attempt_id=`), downloads each
file to its path in the new job folder (streamed to disk beside it, checked for size and
sha256, then renamed into place) and tells the job where it is (`GPUFLEET_RESUME_FROM`). Any
mismatch fails the attempt before it starts: training on a corrupt checkpoint is worse than
starting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import httpx

from gpufleet.artifacts.keys import checked_path
from gpufleet.artifacts.spool import HashingWriter
from gpufleet.errors import AgentError, UnsafeArtifactPath
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.errors import Rejected, Unreachable
from gpufleet.worker.uploads import FileDigest

log = logging.getLogger(__name__)

Json = dict[str, Any]
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.~-]{0,199}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_TRIES = 6


class ResumeFailed(AgentError):
    """The checkpoint could not be put in place; the attempt does not start."""


class Downloads(Protocol):
    async def fetch_checkpoint(self, job_id: str, checkpoint_id: str, attempt_id: str) -> Json: ...

    async def fetch_secrets(self, job_id: str, attempt_id: str) -> Json: ...

    def download(
        self, url: str, headers: dict[str, str]
    ) -> contextlib.AbstractAsyncContextManager[httpx.Response]: ...


@dataclass(frozen=True)
class Resume:
    """The offer's `resume`: which checkpoint, and where the job expects it."""

    checkpoint_id: str
    name: str
    path: str  # the checkpoint folder, relative to the job folder
    step: int | None

    @classmethod
    def from_offer(cls, value: Any) -> Resume | None:
        """None for no resume; `ResumeFailed` saying what is wrong with a bad one."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ResumeFailed(f"the offer's resume is not an object: {value!r:.200}")
        checkpoint_id, name, path = value.get("checkpoint_id"), value.get("name"), value.get("path")
        if not isinstance(checkpoint_id, str) or not _ID.fullmatch(checkpoint_id):
            raise ResumeFailed(f"the offer's resume names no checkpoint id: {value!r:.200}")
        clean = relative(path)
        if clean is None:
            raise ResumeFailed(
                f"the offer's resume path {path!r:.200} is not a folder inside the job folder"
            )
        step = value.get("step")
        return cls(
            checkpoint_id=checkpoint_id,
            name=name if isinstance(name, str) and name else Path(clean).name,
            path=clean,
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        )


async def download_checkpoint(
    downloads: Downloads,
    resume: Resume,
    *,
    job_id: str,
    attempt_id: str,
    folder: Path,
    backoff: Callable[[], Backoff],
) -> list[FileDigest]:
    """Every file of the checkpoint in place under `folder`; `ResumeFailed` otherwise.
    `Fenced` (the attempt is not ours) is raised as it is."""
    answer = await retried(
        backoff,
        functools.partial(downloads.fetch_checkpoint, job_id, resume.checkpoint_id, attempt_id),
        f"checkpoint {resume.name} could not be fetched",
    )
    files = answer.get("files")
    if not isinstance(files, list) or not files:
        raise ResumeFailed(f"checkpoint {resume.name} lists no files to download")
    placed = []
    for entry in files:
        wanted = _wanted(resume, entry)
        url, headers = entry.get("url"), entry.get("headers") or {}
        if not isinstance(url, str) or not url or not isinstance(headers, dict):
            raise ResumeFailed(f"checkpoint {resume.name} file {wanted.path}: no download URL")
        target = folder / wanted.path
        sent = {str(k): str(v) for k, v in headers.items()}
        await retried(
            backoff,
            functools.partial(
                download_file, downloads, url, sent, target, f"checkpoint {resume.name}", wanted
            ),
            f"checkpoint {resume.name} file {wanted.path} could not be downloaded",
        )
        placed.append(wanted)
    log.info("resumed checkpoint %s: %d file(s) in %s", resume.name, len(placed), folder)
    return placed


async def download_file(
    downloads: Downloads,
    url: str,
    headers: dict[str, str],
    target: Path,
    what: str,
    wanted: FileDigest,
) -> None:
    """`wanted` downloaded to `target` (beside it first), checked for size and sha256;
    `ResumeFailed` naming `what` ("checkpoint …", "input …") otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.part")
    try:
        async with downloads.download(url, headers) as response:
            with partial.open("wb") as out:
                size, sha256 = await _written(response, out, wanted.size)
        if size != wanted.size:
            got = f"more than {wanted.size}" if size > wanted.size else str(size)
            raise ResumeFailed(
                f"{what} file {wanted.path} size mismatch: expected {wanted.size} bytes, got {got}"
            )
        if sha256 != wanted.sha256:
            raise ResumeFailed(
                f"{what} file {wanted.path} sha256 mismatch: expected {wanted.sha256}, got {sha256}"
            )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


async def _written(response: httpx.Response, out: BinaryIO, most: int) -> tuple[int, str]:
    """The body into `out`, hashed and written a MiB at a time on a thread while the next
    arrives (`artifacts/spool.py`); (its size, its sha256). Stops reading past `most` bytes:
    such a file is wrong however it ends (the size then said is over `most`)."""
    writer = HashingWriter(out)
    try:
        async for chunk in response.aiter_bytes():
            if writer.size + len(chunk) > most:
                return most + 1, ""
            await writer.write(chunk)
        return writer.size, await writer.close()
    finally:
        await writer.settle()  # the file is closed next: no write may be left running


def _wanted(resume: Resume, entry: Any) -> FileDigest:
    if not isinstance(entry, Mapping):
        raise ResumeFailed(f"checkpoint {resume.name} lists a file that is not an object")
    path, size, sha = entry.get("path"), entry.get("size"), entry.get("sha256")
    clean = relative(path)
    if clean is None:
        raise ResumeFailed(
            f"checkpoint {resume.name} file {path!r:.200} is not a path inside the job folder"
        )
    if not clean.startswith(f"{resume.path}/"):  # config.json, progress.jsonl stay the worker's
        raise ResumeFailed(
            f"checkpoint {resume.name} file {clean!r:.200} is not in its folder {resume.path}"
        )
    return file_digest(f"checkpoint {resume.name}", clean, size, sha)


def file_digest(what: str, path: str, size: Any, sha: Any) -> FileDigest:
    """A listed file's size and sha256, checked; `ResumeFailed` naming `what` otherwise."""
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**63:
        raise ResumeFailed(f"{what} file {path}: bad size {size!r:.40}")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ResumeFailed(f"{what} file {path}: bad sha256 {sha!r:.80}")
    return FileDigest(path, size, sha)


def relative(path: Any) -> str | None:
    """`path` if it is one the store would take (no '..', absolute, NUL, …), else None."""
    if not isinstance(path, str):
        return None
    try:
        return checked_path(path)
    except UnsafeArtifactPath:
        return None


async def retried(
    backoff: Callable[[], Backoff], call: Callable[[], Awaitable[Any]], what: str
) -> Json:
    delays, tries = backoff(), 1
    while True:
        try:
            answer = await call()
        except Unreachable as exc:
            if tries == MAX_TRIES:
                raise ResumeFailed(f"{what}: {exc.message}") from exc
            tries += 1
            await asyncio.sleep(delays.next())
        except Rejected as exc:
            raise ResumeFailed(f"{what}: {exc.message}") from exc
        else:
            return answer if isinstance(answer, dict) else {}
