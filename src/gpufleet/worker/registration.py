"""What the worker tells the orchestrator when it registers: what it is and does."""

from __future__ import annotations

import socket
from typing import Any

from gpufleet import __version__
from gpufleet.domain.matching import AGENT_FEATURES
from gpufleet.worker.detect import Capabilities
from gpufleet.worker.settings import AgentSettings


def registration(
    settings: AgentSettings, caps: Capabilities, job_id: str | None, attempt_id: str | None
) -> dict[str, Any]:
    """The register call's body: name, machine, labels, the job it holds, its features."""
    return {
        "name": settings.name,
        "persistent": settings.persistent,
        **caps.as_wire(),
        "labels": dict(settings.labels),
        "current_job_id": job_id,
        "current_attempt_id": attempt_id,
        "agent": f"gpufleet/{__version__}",
        "hostname": socket.gethostname(),
        "features": [feature.value for feature in AGENT_FEATURES],
    }


def registered_as(worker_id: str, name: object, url: str, caps: Capabilities) -> str:
    """What the agent logs once registered."""
    return (
        f"registered as {worker_id} ({name}) with {url}, offering {caps.gpu_count} GPU(s) "
        f"({caps.accelerator_type}), {caps.cpu_cores} CPU cores, {caps.ram_gb:.1f} GB RAM"
    )
