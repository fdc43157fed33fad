"""Server-Sent Events: framing, a streaming response that never buffers, and the keep-alive
clock of a process's worker streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import StreamingResponse

# The keep-alive clock pings together every stream due within this share of the interval
# (--stream-ping-interval, 0.25 s at its default 15 s): one wake-up for a batch, none of them
# quiet longer than the interval.
PING_BATCH = 1 / 60


def frame(data: dict[str, Any], event: str | None = None, event_id: int | None = None) -> bytes:
    head = b""
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    if event_id is not None:
        head += b"id: " + str(event_id).encode() + b"\n"
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


PING = frame({"type": "ping"}, event="ping")  # encoded once: 10,000 streams send it


def ping() -> bytes:
    return PING


def stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "Connection": "keep-alive",
        },
    )


class Quiet:
    """One stream's place on the keep-alive clock: `due` once it has been quiet for the
    interval (its task is woken to send `PING`), cleared by its next write."""

    __slots__ = ("due", "wake")

    def __init__(self, wake: Callable[[], None]) -> None:
        self.due = False
        self.wake = wake


class KeepAlive:
    """When each open stream of this process is due a ping: one clock for all of them.

    A stream's task waits only for what it has to send (a change, an offer due); this clock
    wakes it when it has written nothing for `interval` seconds (--stream-ping-interval). The
    streams are kept in the order of their last write (a dict: a write moves its stream to
    the end), so the clock looks only at the oldest: 10,000 idle streams cost one timer, not
    10,000 timers each cancelled, rearmed and fired through a `TimeoutError` every round.
    """

    __slots__ = ("_last", "_opened", "interval")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[Quiet, float] = {}  # the streams, oldest write first → its time
        self._opened = asyncio.Event()

    def join(self, wake: Callable[[], None]) -> Quiet:
        """A stream opens (it just wrote its greeting); `wake` wakes its task."""
        quiet = Quiet(wake)
        self._last[quiet] = asyncio.get_running_loop().time()
        self._opened.set()
        return quiet

    def wrote(self, quiet: Quiet) -> None:
        """The stream wrote a frame: its quiet starts again."""
        quiet.due = False
        if self._last.pop(quiet, None) is not None:
            self._last[quiet] = asyncio.get_running_loop().time()

    def leave(self, quiet: Quiet) -> None:
        self._last.pop(quiet, None)

    def __len__(self) -> int:
        return len(self._last)

    async def run(self) -> None:
        """Wake every stream quiet for the interval, forever (the `pings` loop)."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._last:
                self._opened.clear()
                await self._opened.wait()
            now = loop.time()
            interval = self.interval
            soon = now + interval * PING_BATCH
            while self._last:
                quiet, at = next(iter(self._last.items()))
                if at + interval > soon:
                    await asyncio.sleep(at + interval - now)
                    break
                del self._last[quiet]  # to the end: not due again before it writes
                self._last[quiet] = now
                quiet.due = True
                quiet.wake()
