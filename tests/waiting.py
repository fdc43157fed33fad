"""The one way a test waits for something to happen: poll a condition until it holds.

    job = wait_until(lambda: job_done(server, job_id), timeout=30, message=f"job {job_id} to end")
    line = await wait_until_async(lambda: has_line(job_id, "up"), timeout=20, message="'up'")

`condition` is called until it returns something truthy, which is returned; after `timeout`
seconds the test fails with an AssertionError that says what was awaited (`message`) and the
last value the condition gave. `wait_until_async` takes a plain function or one that returns an
awaitable (an `async def`, a lambda around a coroutine) and sleeps on the event loop.

Pauses between polls start short, for what happens at once, and grow to `interval`: a poll is
often a request (several ms of CPU on a busy machine), and a fixed short pause made a five-second
wait a hundred of them. A bare `sleep` before an assertion races; wait for the thing itself.
tests/unit/test_layers.py keeps this module the only home of a polling loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_PAUSE, PAUSE_GROWTH = 0.02, 1.5
INTERVAL = 0.2  # the longest pause between two polls, unless a caller names its own
_SHOWN = 500  # characters of the last value a failure shows


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    message: str,
    interval: float = INTERVAL,
) -> T:
    """`condition()`'s first truthy value, polled for at most `timeout` seconds."""
    poll = _Poll(timeout, message, interval)
    while True:
        value = condition()
        if value:
            return value
        time.sleep(poll.pause_after(value))


async def wait_until_async(
    condition: Callable[[], T | Awaitable[T]],
    *,
    timeout: float,  # noqa: ASYNC109  # the failure names what it awaited, as asyncio.timeout cannot
    message: str,
    interval: float = INTERVAL,
) -> T:
    """`wait_until` on the event loop: `condition` may be async."""
    poll = _Poll(timeout, message, interval)
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(poll.pause_after(value))


class _Poll:
    """One wait's deadline and pauses, shared by the plain and the async loop."""

    def __init__(self, timeout: float, message: str, interval: float) -> None:
        self._deadline = time.monotonic() + timeout
        self._timeout, self._message = timeout, message
        self._pause, self._interval = min(FIRST_PAUSE, interval), interval

    def pause_after(self, value: object) -> float:
        """How long to pause after a poll that gave `value` (falsy); fails past the deadline."""
        if time.monotonic() > self._deadline:
            raise AssertionError(_failure(self._timeout, self._message, value))
        pause = self._pause
        self._pause = min(pause * PAUSE_GROWTH, self._interval)
        return pause


def _failure(timeout: float, message: str, last: object) -> str:
    shown = repr(last)
    if len(shown) > _SHOWN:
        shown = shown[:_SHOWN] + f"… ({len(shown)} characters)"
    return f"timed out after {timeout:g} s waiting for {message}; the last value seen: {shown}"
