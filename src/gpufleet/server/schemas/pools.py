"""Worker pools' bodies (#36). The rules, and every default, are domain/pools.py's: these
only read the shapes, and a field not sent is left for the domain to fill."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from gpufleet.domain.pools import EDITABLE, MAX_GPU_NAME
from gpufleet.domain.states import WorkerType
from gpufleet.server.schemas.base import Name, Record, Strict
from gpufleet.server.services.pools import PoolView

PROVIDER_HELP = (
    'What launches and stops the workers: {"type": "local"} (gpufleet worker processes on '
    'this machine), {"type": "command", "launch": [argv], "terminate": [argv], "list": '
    '[argv] (optional)} (any cloud\'s command-line tool), or {"type": "slurm", "partition": '
    '"gpu", "time_limit": "4:00:00", "account": "lab" (optional)}'
)
# Strict: `true` is not 1, "8" is not 8. The bounds are the domain's (its message says them).
Whole = Field(strict=True)
Unsent = Field(None, strict=True)


def _default(name: str) -> Any:
    return Field(EDITABLE[name], strict=True)


class CreatePool(Strict):
    name: str = Name
    provider: dict[str, Any] = Field(description=PROVIDER_HELP, max_length=8)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    gpu_count: int = _default("gpu_count")
    gpu_name: str | None = Field(None, max_length=MAX_GPU_NAME)
    worker_type: WorkerType = Field(WorkerType(EDITABLE["worker_type"]))
    min_workers: int = _default("min_workers")
    max_workers: int = Whole
    idle_timeout_s: int = _default("idle_timeout_s")
    launch_timeout_s: int = _default("launch_timeout_s")
    price_per_hour: float = Field(EDITABLE["price_per_hour"], strict=True, allow_inf_nan=False)
    max_cost_per_hour: float | None = Field(None, strict=True, allow_inf_nan=False)
    enabled: bool = _default("enabled")


class UpdatePool(Strict):
    """Only the fields sent change; one sent as null goes back to its default (no
    `gpu_name`, no `max_cost_per_hour`)."""

    provider: dict[str, Any] | None = Field(None, description=PROVIDER_HELP, max_length=8)
    labels: dict[str, str] | None = Field(None, max_length=64)
    gpu_count: int | None = Unsent
    gpu_name: str | None = Field(None, max_length=MAX_GPU_NAME)
    worker_type: WorkerType | None = None
    min_workers: int | None = Unsent
    max_workers: int | None = Unsent
    idle_timeout_s: int | None = Unsent
    launch_timeout_s: int | None = Unsent
    price_per_hour: float | None = Field(None, strict=True, allow_inf_nan=False)
    max_cost_per_hour: float | None = Field(None, strict=True, allow_inf_nan=False)
    enabled: bool | None = Unsent


class LaunchOut(Record):
    id: str
    state: str  # launching, registered, failed, terminating or terminated
    instance_id: str | None
    worker_id: str | None
    created_at: datetime
    registered_at: datetime | None
    ended_at: datetime | None
    stderr: str | None  # the provider's, its end
    error: str | None


class PoolOut(Record):
    id: str
    name: str
    provider: dict[str, Any]
    labels: dict[str, str]
    gpu_count: int
    gpu_name: str | None
    worker_type: WorkerType
    min_workers: int
    max_workers: int
    idle_timeout_s: int
    launch_timeout_s: int
    price_per_hour: float
    max_cost_per_hour: float | None
    enabled: bool
    created_at: datetime
    created_by: str | None
    updated_at: datetime
    live_launches: int  # launching, registered or terminating: what max_workers counts

    @classmethod
    def of_view(cls, v: PoolView) -> Self:
        return cls.over(v.pool, provider=v.pool.provider.as_json(), live_launches=v.live_launches)


class PoolDetail(PoolOut):
    launches: list[LaunchOut]  # its newest first

    @classmethod
    def of_view(cls, v: PoolView) -> Self:
        return cls.over(
            v.pool,
            provider=v.pool.provider.as_json(),
            live_launches=v.live_launches,
            launches=[LaunchOut.of(launch) for launch in v.launches],
        )


class PoolList(BaseModel):
    pools: list[PoolOut]
