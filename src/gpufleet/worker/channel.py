"""What a job run (`worker/jobrun.py`) needs from the agent: its connection to the
orchestrator, and the reasons it may be stopped for."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gpufleet.worker.backoff import Backoff
from gpufleet.worker.errors import Unreachable
from gpufleet.worker.resume import Downloads
from gpufleet.worker.uploads import Transfers

Json = dict[str, Any]
log = logging.getLogger("gpufleet.worker.agent")


class Channel(Protocol):
    """What a job needs from the agent's connection."""

    async def deliver_status(self, job_id: str, body: Json) -> None:
        """Send until the orchestrator answers; raises `Fenced` or `Rejected` (4xx)."""

    async def send_logs(self, job_id: str, body: Json) -> None:
        """One try; raises `Unreachable` or `Fenced`."""


class JobClient(Transfers, Downloads, Protocol):
    """The artifact calls of `OrchestratorClient`."""


async def deliver(
    send: Callable[[str, Json], Awaitable[Json]],
    connected: asyncio.Event,
    backoff: Backoff,
    job_id: str,
    body: Json,
) -> None:
    """Send a job's status until the orchestrator answers, waiting while disconnected and,
    after each unreachable try, as `backoff` says."""
    while True:
        await connected.wait()
        try:
            await send(job_id, body)
            return
        except Unreachable as exc:
            delay = backoff.next()
            log.info("status %s of %s waits %.1f s: %s", body.get("status"), job_id, delay, exc)
            await asyncio.sleep(delay)


class StopReason(enum.Enum):
    CANCELLED = "cancelled by the orchestrator"
    ABANDONED = "the orchestrator gave up this attempt while the worker was away"
    SIGNAL = "cancelled on the worker by a signal"
    SHUTDOWN = "the orchestrator shut the worker down"
    FENCED = "the attempt is no longer this worker's"
    PREEMPTED = "the worker's machine is going away (SIGTERM)"
    RECLAIMED = "preempted by the queue policy for another job"
