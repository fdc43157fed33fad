"""What a stored workdir snapshot holds, read from its tar without unpacking it (the job
page's Code panel, docs/jobs.md): each entry's path, size, type and where its bytes start,
so that one small file can then be read by a range of the stored object.

The archive was checked when it was stored (`workdir_archive.check`); this reads its
headers only, streaming: the store's chunks are handed to `tarfile` on a worker thread.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum

TEXT_MAX_BYTES = 256 * 1024  # the most a file shown as text may hold


class Kind(StrEnum):
    FILE = "file"
    LINK = "link"
    DIR = "dir"


class Shown(StrEnum):
    """Whether a file of a snapshot is shown as text, and if not, why."""

    TEXT = "text"
    BINARY = "binary"  # not UTF-8, or holds a NUL byte
    TOO_LARGE = "too_large"  # over TEXT_MAX_BYTES
    LINK = "link"  # a symbolic link: its target is said instead


@dataclass(frozen=True, slots=True)
class Listed:
    path: str
    size: int
    kind: Kind
    offset: int  # where its bytes start in the archive
    link: str | None = None  # a link's target


class _Pulled(io.RawIOBase):
    """A blocking reader over an async iterator of chunks, for a thread: each chunk is
    fetched on the event loop that owns the iterator."""

    def __init__(self, chunks: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._chunks, self._loop, self._held = chunks, loop, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self._held:
            future = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
            self._held = future.result()
        taken, self._held = self._held[: len(buffer)], self._held[len(buffer) :]
        buffer[: len(taken)] = taken
        return len(taken)

    async def _next(self) -> bytes:
        return await anext(self._chunks, b"")


def _scan(source: io.RawIOBase) -> list[Listed]:
    listed: list[Listed] = []
    with tarfile.open(fileobj=io.BufferedReader(source), mode="r|") as tar:
        for member in tar:
            if member.issym():
                listed.append(Listed(member.name, 0, Kind.LINK, 0, member.linkname))
            elif member.isdir():
                listed.append(Listed(member.name.removesuffix("/"), 0, Kind.DIR, 0))
            else:
                listed.append(Listed(member.name, member.size, Kind.FILE, member.offset_data))
    return listed


async def scan(chunks: AsyncIterator[bytes]) -> list[Listed]:
    """The entries of the archive streamed in `chunks`, in the archive's order."""
    source = _Pulled(chunks, asyncio.get_running_loop())
    try:
        return await asyncio.to_thread(_scan, source)
    finally:  # the tar's end may come before the stream's (its padding): close it now
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def as_text(data: bytes) -> str | None:
    """`data` as text, or None when it is not UTF-8 text (a NUL byte says binary)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None
