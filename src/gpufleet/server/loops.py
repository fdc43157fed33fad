"""Named background loops under one supervisor that stops loudly if a loop dies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("gpufleet.server.loops")


class LoopDied(RuntimeError):
    pass


class Supervisor:
    """Runs each loop as a named task; a loop that raises takes the process down loudly."""

    def __init__(self, on_death: Callable[[str, BaseException], None]) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._on_death = on_death

    def every(self, name: str, interval: float, step: Callable[[], Awaitable[object]]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await step()
                except asyncio.CancelledError:
                    raise
                except Exception:  # one bad sweep is logged; the next one tries again
                    log.exception("loop %s: a sweep failed; retrying in %.1f s", name, interval)

        self.start(name, loop())

    def start(self, name: str, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task.add_done_callback(self._done)
        self._tasks[name] = task

    def _done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.critical("background loop %s died: %r", task.get_name(), exc)
            self._on_death(task.get_name(), exc)

    @property
    def names(self) -> list[str]:
        return sorted(self._tasks)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
