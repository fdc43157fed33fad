"""Bytes arriving from the network written to a file and hashed on the way, off the event
loop: the orchestrator spooling a workdir upload, the worker downloading one.

The network's chunks are small (64 KiB from uvicorn or httpx): they are gathered into
batches of `BATCH` bytes, and each batch is hashed and written on a thread while the next
one arrives (one batch in flight at a time, so memory stays bounded by two batches).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import BinaryIO

BATCH = 1024 * 1024


class HashingWriter:
    def __init__(self, out: BinaryIO | None) -> None:
        """`out` None: the bytes are hashed, not kept."""
        self._out = out
        self._sha = hashlib.sha256()
        self._batch: list[bytes] = []
        self._batched = 0
        self._pending: asyncio.Future[None] | None = None
        self.size = 0

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= BATCH:
            await self._flush()

    async def close(self) -> str:
        """Write what is left; the sha256 (hex) of every byte written."""
        await self._flush()
        await self.settle()
        return self._sha.hexdigest()

    async def settle(self) -> None:
        """Wait for the batch in flight: call it before closing the file, whatever failed."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending

    async def _flush(self) -> None:
        await self.settle()
        data = b"".join(self._batch)
        self._batch, self._batched = [], 0
        self._pending = asyncio.ensure_future(asyncio.to_thread(self._hash_write, data))

    def _hash_write(self, data: bytes) -> None:
        self._sha.update(data)
        if self._out is not None:
            self._out.write(data)
