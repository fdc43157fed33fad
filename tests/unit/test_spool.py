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


class Recording(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data: object) -> int:
        assert isinstance(data, bytes)
        self.sizes.append(len(data))
        return super().write(data)


async def test_the_file_is_written_a_batch_at_a_time_of_the_size_asked() -> None:
    batch = 4 * BATCH
    data = os.urandom(2 * batch + 100)
    out = Recording()
    spool = HashingWriter(out, batch=batch)
    for start in range(0, len(data), 65536):
        await spool.write(data[start : start + 65536])
    assert await spool.close() == hashlib.sha256(data).hexdigest()
    assert out.sizes == [batch, batch, 100] and out.getvalue() == data


async def test_a_failed_write_is_raised_once_its_hashing_is_done_too() -> None:
    spool = HashingWriter(Full(), batch=BATCH)
    await spool.write(b"x" * BATCH)  # in flight: hashed on one thread, written on another
    with pytest.raises(OSError, match="No space"):
        await spool.settle()
    await spool.settle()  # nothing left to raise again
    assert await spool.close() == hashlib.sha256(b"x" * BATCH).hexdigest()
