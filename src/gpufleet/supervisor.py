"""Named background tasks that live and die together, for the orchestrator and the worker.

Every loop (the orchestrator's sweeps, the agent's session, heartbeat and jobs) runs here
under a name. When one raises, or a loop marked `forever` returns, the supervisor logs it,
stops, and tells its owner through `on_death`: the orchestrator stops its process, the worker
raises `LoopDied` from `run()`. A half-dead process that still looks alive is worse than one
that stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gpufleet.errors import GpufleetError, LoopDied

log = logging.getLogger(__name__)

OnDeath = Callable[[str, BaseException], None]


class Supervisor:
    def __init__(self, on_death: OnDeath | None = None) -> None:
        self._tasks: dict[asyncio.Task[None], bool] = {}
        self._failure: BaseException | None = None
        self._stopping = asyncio.Event()
        self._on_death = on_death

    def spawn(
        self, name: str, coro: Coroutine[Any, Any, None], *, forever: bool = False
    ) -> asyncio.Task[None]:
        """Run `coro` as a task named `name`; `forever` tasks must not return while we run."""
        if self._stopping.is_set():
            coro.close()
            raise LoopDied(f"cannot start {name}: the process is stopping")
        task = asyncio.create_task(coro, name=name)
        self._tasks[task] = forever
        task.add_done_callback(self._on_done)
        return task

    def every(
        self, name: str, interval: float, step: Callable[[], Awaitable[object]]
    ) -> asyncio.Task[None]:
        """Run `step` every `interval` seconds, forever; a step that raises is only logged."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await step()
                except asyncio.CancelledError:
                    raise
                except Exception:  # one bad sweep is logged; the next one tries again
                    log.exception("loop %s: a sweep failed; retrying in %.1f s", name, interval)

        return self.spawn(name, loop(), forever=True)

    @property
    def names(self) -> list[str]:
        return sorted(task.get_name() for task in self._tasks)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask `run()` to end: it then cancels every task."""
        self._stopping.set()

    async def close(self) -> None:
        """Stop now: cancel every task and wait for them to end."""
        self._stopping.set()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def run(self) -> None:
        """Wait until `stop()` or a death, then close; a death is raised."""
        try:
            await self._stopping.wait()
        finally:
            await self.close()
        if self._failure is not None:
            if isinstance(self._failure, GpufleetError):
                raise self._failure
            raise LoopDied(
                f"the process stopped because a background loop died ({self._failure!r}); "
                "see the traceback in the log"
            ) from self._failure

    def _on_done(self, task: asyncio.Task[None]) -> None:
        forever = self._tasks.pop(task, False)
        if task.cancelled():
            return
        failure = task.exception()
        if self._stopping.is_set():
            if failure is not None:
                log.warning("%s failed while stopping: %r", task.get_name(), failure)
            return
        if failure is None and not forever:
            return
        if failure is None:
            failure = LoopDied(f"background loop {task.get_name()!r} returned while it should run")
        self._die(task.get_name(), failure)

    def _die(self, name: str, failure: BaseException) -> None:
        if isinstance(failure, GpufleetError):  # said once, by whoever catches it from run()
            log.debug("%s stopped the process: %s", name, failure.message)
        else:
            log.error("background loop %r died", name, exc_info=failure)
        self._failure = failure
        self._stopping.set()
        if self._on_death is not None:
            self._on_death(name, failure)
