"""The fleet as every signed-in key sees it (read-only: no token, no admin-only field), and
the fleet over time."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel

from gpufleet.domain.fleet_history import FleetSample
from gpufleet.domain.presence import PRESENCE_TEXT, PRESENCE_TONE, presence, up_since
from gpufleet.domain.records import Worker
from gpufleet.server.schemas.base import Record


class FleetWorkerOut(Record):
    """What anyone may know of a worker to understand why a job waits."""

    id: str
    name: str
    status: str
    presence: str
    presence_text: str
    presence_tone: str  # the status whose colour its badge wears: one colour a word
    worker_type: str
    registered: bool  # False: its GPUs are not reported yet
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    labels: dict[str, str]  # what jobs are matched against
    drained: bool
    busy: bool
    gpu_util_pct: float | None  # the mean load of its GPUs now; None: it reports none
    last_heartbeat: datetime | None
    up_since: datetime | None

    @classmethod
    def of(cls, w: Worker) -> Self:
        loads = [s.utilization_pct for s in w.live_gpu_stats if s.utilization_pct is not None]
        seen = presence(w)
        return cls.over(
            w,
            presence=seen.value,
            presence_text=PRESENCE_TEXT[seen],
            presence_tone=PRESENCE_TONE[seen].value,
            busy=w.current_job_id is not None,
            gpu_util_pct=sum(loads) / len(loads) if loads else None,
            up_since=up_since(w),
        )


class FleetWorkerList(BaseModel):
    workers: list[FleetWorkerOut]
    counts: dict[str, int]  # workers per `presence` (every one, 0 included): what rows say
    tones: dict[str, str]  # each presence's badge colour, for the counts


class FleetSampleOut(Record):
    at: datetime
    workers_busy: float
    workers_idle: float
    workers_unavailable: float
    gpus: float
    gpus_busy: float
    gpu_util_pct: float | None
    queue_depth: float
    jobs_started: int
    wait_p50_s: float | None
    wait_p90_s: float | None

    @classmethod
    def of_sample(cls, s: FleetSample) -> Self:
        return cls.of(s)


class FleetHistoryOut(BaseModel):
    range_s: int
    resolution_s: int  # 0: every sample, else the seconds each row sums up (900)
    group: str  # "": the whole fleet; else a worker label as key=value
    groups: list[str]  # every group sampled in the range, to choose from
    samples: list[FleetSampleOut]  # oldest first
