"""Named background tasks that live and die together.

Every loop of the agent (session, heartbeat, log shipping, progress relay, each running job)
is spawned here under a name. When one raises, or a loop marked `forever` returns, the
supervisor logs it with its traceback, cancels the others and raises: a half-dead agent that
still looks alive to the orchestrator is worse than one that stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from gpufleet.errors import AgentError, GpufleetError

log = logging.getLogger(__name__)


class LoopDied(AgentError):
    pass


class Supervisor:
    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[None], bool] = {}
        self._failure: BaseException | None = None
        self._stopping = asyncio.Event()

    def spawn(
        self, name: str, coro: Coroutine[Any, Any, None], *, forever: bool = False
    ) -> asyncio.Task[None]:
        """Run `coro` as a task named `name`; `forever` tasks must not return while we run."""
        if self._stopping.is_set():
            coro.close()
            raise LoopDied(f"cannot start {name}: the agent is stopping")
        task = asyncio.create_task(coro, name=name)
        self._tasks[task] = forever
        task.add_done_callback(self._on_done)
        return task

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Wait until `stop()` or a failure, then cancel and await every task."""
        try:
            await self._stopping.wait()
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._failure is not None:
            if isinstance(self._failure, GpufleetError):
                raise self._failure
            raise LoopDied(
                f"the worker stopped because a background loop died ({self._failure!r}); "
                "see the traceback in the log"
            ) from self._failure

    def _on_done(self, task: asyncio.Task[None]) -> None:
        forever = self._tasks.pop(task, False)
        if task.cancelled():
            return
        failure = task.exception()
        if self._stopping.is_set():
            if failure is not None:
                log.warning("%s failed while the agent stopped: %r", task.get_name(), failure)
            return
        if failure is None and not forever:
            return
        if failure is None:
            failure = LoopDied(f"background loop {task.get_name()!r} returned while it should run")
        if isinstance(failure, GpufleetError):  # said once, by whoever catches it from run()
            log.debug("%s stopped the agent: %s", task.get_name(), failure.message)
        else:
            log.error("background loop %r died", task.get_name(), exc_info=failure)
        self._failure = failure
        self._stopping.set()
