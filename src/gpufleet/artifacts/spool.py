"""Bytes arriving from the network written to a file and hashed on the way, off the event
loop: the orchestrator spooling an upload, the worker downloading one.

The network's chunks are small (64 KiB from uvicorn or httpx): they are gathered into
batches of `batch` bytes, and each batch is hashed on one thread and written on another
while the next one arrives (one batch in flight at a time, so memory stays bounded by two
batches). Hashing and writing side by side, a batch costs the longer of the two, not their
sum (#39 goal 4: the sha256 and the page cache's copy took about as long each).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import BinaryIO

BATCH = 1024 * 1024


class HashingWriter:
    def __init__(self, out: BinaryIO | None, batch: int = BATCH) -> None:
        """`out` None: the bytes are hashed, not kept."""
        self._out = out
        self._limit = batch
        self._sha = hashlib.sha256()
        self._batch: list[bytes] = []
        self._batched = 0
        self._pending: list[asyncio.Future[object]] = []
        self.size = 0

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= self._limit:
            await self._flush()

    async def close(self) -> str:
        """Write what is left; the sha256 (hex) of every byte written."""
        await self._flush()
        await self.settle()
        return self._sha.hexdigest()

    async def settle(self) -> None:
        """Wait for the batch in flight, its hashing and its write both, and raise what
        failed: call it before closing the file, whatever failed."""
        if not self._pending:
            return
        await asyncio.wait(self._pending)  # kept until done: a cancelled wait is waited again
        pending, self._pending = self._pending, []
        for done in pending:
            done.result()

    async def _flush(self) -> None:
        await self.settle()
        data = b"".join(self._batch)
        self._batch, self._batched = [], 0
        if not data:
            return
        self._pending.append(asyncio.ensure_future(asyncio.to_thread(self._sha.update, data)))
        if self._out is not None:
            self._pending.append(asyncio.ensure_future(asyncio.to_thread(self._out.write, data)))
