"""`HashingWriter` (artifacts/spool.py): every byte written and hashed, in order, whatever
the chunks' sizes; a failed write is raised, never lost."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from gpufleet.artifacts.spool import BATCH, HashingWriter


async def test_every_byte_is_written_and_hashed_in_order() -> None:
    data = os.urandom(3 * BATCH + 12345)
    out = io.BytesIO()
    spool = HashingWriter(out)
    for start in range(0, len(data), 65536):
        await spool.write(data[start : start + 65536])
    assert await spool.close() == hashlib.sha256(data).hexdigest()
    assert out.getvalue() == data and spool.size == len(data)


async def test_nothing_written_hashes_as_empty() -> None:
    out = io.BytesIO()
    assert await HashingWriter(out).close() == hashlib.sha256(b"").hexdigest()
    assert out.getvalue() == b""


class Full(io.BytesIO):
    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")


async def test_a_failed_write_is_raised() -> None:
    spool = HashingWriter(Full())
    with pytest.raises(OSError, match="No space"):
        for _ in range(3):
            await spool.write(b"x" * BATCH)
        await spool.close()
    await spool.settle()  # nothing left in flight
