"""What a worker agent sends and is answered: register, heartbeat, status, logs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from gpufleet.domain.gpu_health import MAX_XIDS, GpuReading, Preflight
from gpufleet.domain.states import WorkerType
from gpufleet.server.schemas.base import Lenient


class GpuInfo(Lenient):
    """The SimpleTuner agent's capability shape."""

    name: str | None = Field(None, max_length=256)
    vram_gb: float | None = Field(None, ge=0)
    count: int = Field(0, ge=0, le=1024)
    driver: str | None = Field(None, max_length=128)
    accelerator: str | None = Field(None, max_length=32)


class GpuHealthIn(Lenient):
    """One GPU's health (`gpufleet worker` only; domain.gpu_health.GpuReading)."""

    index: int = Field(ge=0, le=1023)
    lost: bool = False
    xids: list[Annotated[int, Field(ge=0, le=1_000_000)]] = Field(
        default_factory=list, max_length=MAX_XIDS
    )
    ecc_uncorrected: int | None = Field(None, ge=0, le=2**62)
    retired_pending: bool | None = None
    remap_failed: bool | None = None
    remap_pending: bool | None = None
    temperature_c: float | None = Field(None, ge=-100, le=1000)
    throttle: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=32
    )

    def reading(self) -> GpuReading:
        return GpuReading(
            index=self.index,
            lost=self.lost,
            xids=tuple(self.xids),
            ecc_uncorrected=self.ecc_uncorrected,
            retired_pending=self.retired_pending,
            remap_failed=self.remap_failed,
            remap_pending=self.remap_pending,
            temperature_c=self.temperature_c,
            throttle=tuple(self.throttle),
        )


class PreflightIn(Lenient):
    """The worker's preflight as it last ran: passed, or failed with this output."""

    ok: bool
    output: str = Field("", max_length=100_000)

    def result(self) -> Preflight:
        return Preflight(ok=self.ok, output=self.output)


class Health(Lenient):
    """What `gpufleet worker` adds to its register and heartbeat bodies; an agent that sends
    neither (the SimpleTuner agent) reports no health and keeps working unchanged."""

    gpu_health: list[GpuHealthIn] | None = Field(None, max_length=1024)
    preflight: PreflightIn | None = None

    def readings(self) -> list[GpuReading] | None:
        if self.gpu_health is None:
            return None
        return [g.reading() for g in self.gpu_health]

    def preflight_result(self) -> Preflight | None:
        return None if self.preflight is None else self.preflight.result()


class RegisterIn(Health):
    name: str | None = Field(None, max_length=128)
    persistent: bool | None = None
    worker_type: WorkerType | None = None
    gpu_count: int | None = Field(None, ge=0, le=1024)
    gpu_name: str | None = Field(None, max_length=256)
    gpu_vram_gb: float | None = Field(None, ge=0)
    accelerator_type: str | None = Field(None, max_length=32)
    gpu_info: GpuInfo | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list, max_length=1024)
    driver_version: str | None = Field(None, max_length=128)
    cuda_version: str | None = Field(None, max_length=64)
    cpu_cores: int | None = Field(None, ge=0)
    ram_gb: float | None = Field(None, ge=0)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    current_job_id: str | None = Field(None, max_length=64)
    current_attempt_id: str | None = Field(None, max_length=64)
    agent: str | None = Field(None, max_length=128)
    hostname: str | None = Field(None, max_length=256)
    # What the agent does beyond running a SimpleTuner config (domain.matching.Feature).
    features: list[Annotated[str, Field(max_length=32)]] | None = Field(None, max_length=16)


class RegisterOut(BaseModel):
    worker_id: str
    name: str
    status: str
    labels: dict[str, str]
    heartbeat_interval: float
    resume_job: dict[str, str] | None
    abandon_job: bool


class GpuStatIn(Lenient):
    index: int = Field(ge=0, le=1023)
    utilization_pct: float | None = Field(None, ge=0, le=100)
    memory_used_gb: float | None = Field(None, ge=0, le=1e6)
    memory_total_gb: float | None = Field(None, ge=0, le=1e6)


class HeartbeatIn(Health):
    worker_id: str | None = None
    status: str | None = None
    current_job_id: str | None = Field(None, max_length=64)
    current_attempt_id: str | None = Field(None, max_length=64)
    # `gpufleet worker` only: each GPU's load now (NVML). Agents that send none keep none.
    gpu_stats: list[GpuStatIn] | None = Field(None, max_length=1024)


class HeartbeatOut(BaseModel):
    ok: bool
    status: str
    draining: bool


class StatusIn(Lenient):
    status: str = Field(min_length=1, max_length=32)
    attempt_id: str | None = Field(None, max_length=64)
    error: str | None = Field(None, max_length=100_000)
    exit_code: int | None = Field(None, ge=-(2**31), le=2**31 - 1)  # an INTEGER column
    progress: dict[str, Any] | None = None
    # The progress lines the job wrote before `progress` since the last report, oldest first
    # (chart points only; domain.bounds.points_problem bounds them).
    points: list[dict[str, Any]] = Field(default_factory=list)
    # One node of a multi-node attempt (docs/protocol.md): its rank; in its acknowledgement,
    # rank 0's free MASTER_PORT and the worker's --advertise-addr.
    node_rank: int | None = Field(None, ge=0, le=63)
    port: int | None = Field(None, ge=1, le=65_535)
    address: str | None = Field(None, min_length=1, max_length=256)


class StatusOut(BaseModel):
    ok: bool
    job_status: str


class LogLineIn(Lenient):
    stream: Literal["stdout", "stderr"] = "stdout"
    text: str = Field(max_length=65_536)


class LogsIn(Lenient):
    attempt_id: str | None = Field(None, max_length=64)
    # Index of the first line in the sender's output: a re-sent batch is stored once (not on
    # a multi-node attempt: docs/protocol.md, Logs).
    first: int | None = Field(None, ge=0, le=2**40)
    lines: list[LogLineIn] = Field(max_length=1000)
    # The node of a multi-node job's attempt that printed them (`first` counts its own).
    node_rank: int | None = Field(None, ge=0, le=63)


class WorkerIdIn(Lenient):
    worker_id: str | None = None


class JobSecretsOut(BaseModel):
    """What a job's env refers to, resolved for its live attempt (never logged, never stored
    by the worker)."""

    env: dict[str, str]
