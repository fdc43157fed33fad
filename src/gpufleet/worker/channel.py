"""What a job run (`worker/jobrun.py`) needs from the agent: its connection to the
orchestrator, and the reasons it may be stopped for."""

from __future__ import annotations

import enum
from typing import Any, Protocol

from gpufleet.worker.resume import Downloads
from gpufleet.worker.uploads import Transfers

Json = dict[str, Any]


class Channel(Protocol):
    """What a job needs from the agent's connection."""

    async def deliver_status(self, job_id: str, body: Json) -> None:
        """Send until the orchestrator answers; raises `Fenced` or `Rejected` (4xx)."""

    async def send_logs(self, job_id: str, body: Json) -> None:
        """One try; raises `Unreachable` or `Fenced`."""


class JobClient(Transfers, Downloads, Protocol):
    """The artifact calls of `OrchestratorClient`."""


class StopReason(enum.Enum):
    CANCELLED = "cancelled by the orchestrator"
    ABANDONED = "the orchestrator gave up this attempt while the worker was away"
    SIGNAL = "cancelled on the worker by a signal"
    SHUTDOWN = "the orchestrator shut the worker down"
    FENCED = "the attempt is no longer this worker's"
    PREEMPTED = "the worker's machine is going away (SIGTERM)"
    RECLAIMED = "preempted by the queue policy for another job"
