"""A data-folder store's files, written and read without obstore (artifacts/store.py).

A write is received straight into a file under `incoming/` (never listed; one left behind by
a stopped orchestrator goes with the retention sweep's staged objects after a day), hashed and
written a MiB at a time on a thread while the next MiB arrives (`artifacts/spool.py`), and
renamed to its key only once its size and sha256 are right: one copy, no second pass.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path

from gpufleet.artifacts.spool import HashingWriter
from gpufleet.errors import ArtifactCorrupt, PayloadTooLarge

STAGING_PREFIX = "incoming"
READ_CHUNK = 1024 * 1024


async def write_file(
    folder: Path,
    key: str,
    chunks: AsyncIterable[bytes],
    sha256: str | None,
    max_size: int | None,
    disk_error: Callable[[OSError], Exception],
) -> tuple[int, str]:
    """`chunks` stored as the file of `key` under `folder` if they hash to `sha256` (any, when
    None) within `max_size` bytes; (their size, their sha256). Else nothing is left behind and
    the failure is raised: the stream's own as it was raised, `ArtifactCorrupt`,
    `PayloadTooLarge`, or what `disk_error` makes of the disk's `OSError`."""
    source: list[BaseException] = []  # a failure of `chunks`, not of the disk
    try:
        fd, name = await asyncio.to_thread(_temporary, folder / STAGING_PREFIX)
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                writer = HashingWriter(out)
                try:
                    async for chunk in _noted(chunks, source):
                        if max_size is not None and writer.size + len(chunk) > max_size:
                            raise too_large(max_size)
                        await writer.write(chunk)
                    actual = await writer.close()
                finally:
                    await writer.settle()  # the file is closed next: no write may be running
            check_digest(actual, sha256, writer.size)
            await asyncio.to_thread(move, path, folder / key)
        finally:
            await asyncio.to_thread(path.unlink, True)
    except OSError as exc:
        if exc in source:
            raise
        raise disk_error(exc) from exc
    return writer.size, actual


async def _noted(
    chunks: AsyncIterable[bytes], failures: list[BaseException]
) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except BaseException as exc:
        failures.append(exc)
        raise


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the file is over the job's artifact limit of {limit} bytes; keep fewer files or "
        "raise the limit"
    )


def check_digest(actual: str, expected: str | None, size: int) -> None:
    if expected is not None and actual != expected:
        raise ArtifactCorrupt(
            f"the file's sha256 is {actual} ({size} bytes), not the announced {expected}; "
            "nothing was stored, upload it again"
        )


def move(path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)


async def file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, READ_CHUNK):
            yield chunk


def _temporary(folder: Path) -> tuple[int, str]:
    folder.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=folder, prefix="put-")
