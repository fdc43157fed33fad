"""Ship a job's output to the orchestrator in batches while it runs.

Lines wait in a `LogBuffer` until the `LogShipper` sends them: every `interval` seconds, or as
soon as `flush_lines` are waiting. A batch leaves the buffer only once the orchestrator took
it, so lines printed while the orchestrator is away are sent, in order, when it is back. The
buffer is bounded: past `capacity` lines the oldest go, and a marker line says how many.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from gpufleet.domain.bounds import MAX_LOG_BATCH_BYTES, MAX_LOG_BATCH_LINES
from gpufleet.worker.errors import Fenced, Rejected, Unreachable

log = logging.getLogger(__name__)

# The orchestrator's bounds on one batch (docs/protocol.md): a batch is split to stay in them.
MAX_BATCH_LINES = MAX_LOG_BATCH_LINES
MAX_BATCH_BYTES = MAX_LOG_BATCH_BYTES  # of the lines' text, UTF-8

Line = dict[str, str]
SendBatch = Callable[[list[Line], int], Awaitable[Any]]  # the batch, and its first line's index


class LogBuffer:
    def __init__(self, *, flush_lines: int = 200, capacity: int = 100_000) -> None:
        self._lines: deque[Line] = deque()
        self._flush_lines = flush_lines
        self._capacity = capacity
        self._dropped = 0
        self.position = 0  # index, in the attempt's shipped output, of the oldest line held
        self.full = asyncio.Event()  # set once `flush_lines` are waiting

    def add(self, stream: str, text: str) -> None:
        self._lines.append({"stream": stream, "text": text})
        if len(self._lines) > self._capacity:
            self._lines.popleft()
            self._dropped += 1
        if len(self._lines) >= self._flush_lines:
            self.full.set()

    def __len__(self) -> int:
        return len(self._lines)

    def peek(self) -> list[Line]:
        """The next batch, oldest first, left in the buffer until `commit`."""
        if self._dropped:
            note = (
                f"[gpufleet] {self._dropped} lines of output were dropped while the "
                "orchestrator was unreachable"
            )
            self._lines.appendleft({"stream": "stderr", "text": note})
            self._dropped = 0
        batch: list[Line] = []
        size = 0
        for line in self._lines:
            size += _size(line["text"])
            if batch and (len(batch) >= MAX_BATCH_LINES or size > MAX_BATCH_BYTES):
                break
            batch.append(line)
        if batch and _size(batch[0]["text"]) > MAX_BATCH_BYTES:  # one line over it alone
            text = batch[0]["text"].encode("utf-8", "replace")[:MAX_BATCH_BYTES]
            batch[0] = {**batch[0], "text": text.decode("utf-8", "ignore")}
        return batch

    def commit(self, count: int) -> None:
        for _ in range(count):
            self._lines.popleft()
        self.position += count
        if len(self._lines) < self._flush_lines:
            self.full.clear()


def _size(text: str) -> int:
    """The bytes the orchestrator counts: the text as UTF-8 (a lone surrogate as 3)."""
    return len(text.encode("utf-8", "surrogatepass"))


class LogShipper:
    def __init__(self, buffer: LogBuffer, send: SendBatch, *, interval: float) -> None:
        self._buffer = buffer
        self._send = send
        self._interval = interval

    async def run(self) -> None:
        """Send batches until cancelled. Raises `Fenced` when the job is no longer ours."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._buffer.full.wait()
            try:
                await self.flush()
            except Unreachable as exc:
                log.debug("logs wait for the orchestrator: %s", exc)
                await asyncio.sleep(self._interval)

    async def flush(self) -> None:
        """Send everything waiting now. Raises `Unreachable` (kept for later) or `Fenced`."""
        while batch := self._buffer.peek():
            try:
                # The index makes a re-sent batch harmless: the orchestrator keeps a line once.
                await self._send(batch, self._buffer.position)
            except Fenced:
                raise
            except Rejected as exc:  # the orchestrator will never take this batch: skip it
                log.error("the orchestrator refused %d log lines: %s", len(batch), exc.message)
            self._buffer.commit(len(batch))
