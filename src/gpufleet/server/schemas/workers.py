"""The workers as an operator manages them: create, list, inspect, label, drain."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Self

from pydantic import BaseModel, Field

from gpufleet.domain.presence import (
    PRESENCE_TEXT,
    PRESENCE_TONE,
    offline_due,
    presence,
    requeue_due,
    up_since,
)
from gpufleet.domain.records import WorkedAttempt, Worker
from gpufleet.domain.states import WorkerType, can_delete_worker
from gpufleet.server.schemas.base import Name, Record, Strict


class CreateWorker(Strict):
    name: str = Name
    worker_type: WorkerType | None = None
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)


class CreatedWorker(BaseModel):
    worker_id: str
    token: str
    name: str


class OrchestratorOut(BaseModel):
    public_url: str  # what workers elsewhere call (`--public-url`, or its default)
    listening_on: str  # `--host`: 127.0.0.1 means no other machine can reach it
    gpufleet: str  # this installation's `gpufleet`, by absolute path when found


class RotatedToken(BaseModel):
    worker_id: str
    token: str


class GpuFaultOut(Record):
    index: int
    reason: str


class WorkerOut(Record):
    id: str
    name: str
    status: str
    worker_type: str
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    labels: dict[str, str]
    admin_labels: dict[str, str]
    last_heartbeat: datetime | None
    current_job_id: str | None
    drained: bool
    is_local: bool
    registered: bool
    deletable: bool  # offline, or never connected (DELETE answers 409 otherwise)
    jobs_run: int
    created_at: datetime
    connected_at: datetime | None
    offline_since: datetime | None
    capabilities: dict[str, Any]
    # What an operator is told (domain.presence): `status` in finer words, e.g. a
    # `connecting` worker that never connected, or whose token was rotated since it spoke.
    presence: str
    presence_text: str
    presence_tone: str  # the status whose colour its badge wears: one colour a word
    up_since: datetime | None  # when its open stream opened; None while none is open
    # Its stream gone: when the health sweep marks it offline, and requeues the job it
    # holds, unless it is heard from first (None while it is connected, or offline).
    offline_due: datetime | None
    requeue_due: datetime | None
    token_issued_at: datetime | None
    # Held for the multi-node job at the head of the queue (docs/jobs.md): that job, since
    # when, and in words ("held for job j_... (2 of 4 nodes)"); None when not held.
    held_for: str | None
    held_since: datetime | None
    held_note: str | None
    # Health (docs/workers.md): its faulty GPUs, taken out until it registers again (its
    # `gpu_count` is what it still offers); its failing preflight's output (None: passing or
    # none); why it was drained (the circuit breaker says; None for an admin's drain); its
    # attempts in a row ended by infrastructure failure.
    gpu_faults: list[GpuFaultOut]
    preflight_error: str | None
    drain_reason: str | None
    infra_failures: int

    @classmethod
    def shown(cls, w: Worker, silence: timedelta) -> Self:
        """`silence`: the heartbeat timeout (`--heartbeat-timeout`)."""
        return cls.over(w, **_told(w, silence))


def _told(w: Worker, silence: timedelta) -> dict[str, object]:
    """What a worker's record does not say outright."""
    seen = presence(w)
    return {
        "presence": seen.value,
        "presence_text": PRESENCE_TEXT[seen],
        "presence_tone": PRESENCE_TONE[seen].value,
        "up_since": up_since(w),
        "offline_due": offline_due(w, silence),
        "requeue_due": requeue_due(w, silence),
        "deletable": can_delete_worker(w.status, ever_connected=w.ever_connected),
    }


class GpuStatOut(Record):
    index: int
    utilization_pct: float | None
    memory_used_gb: float | None
    memory_total_gb: float | None
    temperature_c: float | None  # `gpufleet worker` with NVML or nvidia-smi; else None
    throttle: str | None  # its active clock throttle reasons, in words


class WorkedAttemptOut(Record):
    job_id: str
    attempt_id: str
    number: int
    status: str  # the attempt's
    job_status: str
    config_name: str | None
    offered_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    error: str | None

    @classmethod
    def of(cls, entry: WorkedAttempt) -> Self:
        return cls.over(
            entry.attempt,
            attempt_id=entry.attempt.id,
            job_status=entry.job_status,
            config_name=entry.config_name,
        )


# What the worker said of its machine when it registered, kept in its capabilities.
_REPORTED = ("hostname", "address", "driver_version", "cuda_version", "cpu_cores", "ram_gb")


class WorkerDetail(WorkerOut):
    """One worker for its page: what it reported, its live GPU load and its job history."""

    reported_labels: dict[str, str]  # `labels` is these under `admin_labels` (admin wins)
    agent: str  # "gpufleet 0.1.0", "SimpleTuner agent"
    hostname: str | None
    address: str | None  # where it registered from, as the orchestrator saw it
    driver_version: str | None
    cuda_version: str | None
    cpu_cores: int | None
    ram_gb: float | None
    gpus: list[dict[str, Any]]  # each as the worker reported it: index, name, memory_gb, uuid
    gpu_stats: list[GpuStatOut]  # the newest sample; empty when the worker sends none
    gpu_stats_at: datetime | None
    history: list[WorkedAttemptOut]  # its newest attempts first

    @classmethod
    def of_detail(cls, w: Worker, history: list[WorkedAttempt], silence: timedelta) -> Self:
        caps = w.capabilities
        return cls.over(
            w,
            **_told(w, silence),
            **{name: caps.get(name) for name in _REPORTED},
            gpus=list(caps.get("gpus") or []),
            gpu_stats=w.live_gpu_stats,
            gpu_stats_at=w.gpu_stats_at if w.live_gpu_stats else None,
            history=[WorkedAttemptOut.of(entry) for entry in history],
        )


class SetLabelsIn(Strict):
    labels: dict[str, str] = Field(max_length=64)


class UnmatchedJob(BaseModel):
    job_id: str
    summary: str  # the job's `waiting.summary`
    summaries: dict[str, str]  # and `waiting.summaries`: the same for the UI and the CLI
    code: str
    params: dict[str, Any]


class WorkerList(BaseModel):
    workers: list[WorkerOut]
    counts: dict[str, int]  # workers per `presence` (every one, 0 included): what rows say
    tones: dict[str, str]  # each presence's badge colour (`presence_tone`), for the counts
    # Queued jobs (from the head of the queue) that no registered worker can run.
    unmatched_jobs: list[UnmatchedJob]
