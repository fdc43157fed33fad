"""A folder of stored files as one tar stream, built while it is sent (a checkpoint's
download): each file's header, its bytes as the store streams them, the padding to a
512-byte block, then the archive's end. Its length is known before the first byte."""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

BLOCK = 512
END = b"\0" * (2 * BLOCK)


@dataclass(frozen=True, slots=True)
class Member:
    name: str  # its path inside the archive
    size: int
    mtime: datetime
    key: str  # where the store keeps its bytes


def header(member: Member) -> bytes:
    info = tarfile.TarInfo(member.name)
    info.size = member.size
    info.mtime = int(member.mtime.timestamp())
    info.mode = 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)  # long and non-ASCII names as PAX records


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def archive_size(members: Sequence[Member]) -> int:
    return sum(len(header(m)) + m.size + len(_padding(m.size)) for m in members) + len(END)


async def archive(
    members: Sequence[Member], open_key: Callable[[str], Awaitable[AsyncIterator[bytes]]]
) -> AsyncIterator[bytes]:
    """The tar of `members`, their bytes read from the store one file at a time; a file
    whose stored bytes are not its recorded size stops the stream (a truncated download)."""
    for member in members:
        yield header(member)
        sent = 0
        async for chunk in await open_key(member.key):
            sent += len(chunk)
            yield chunk
        if sent != member.size:
            raise OSError(f"{member.name}: the store held {sent} bytes, not {member.size}")
        yield _padding(member.size)
    yield END
