"""Request and response bodies at the HTTP edge (pydantic), and their mapping to records."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain import audit_chain
from gpufleet.domain.presence import PRESENCE_TEXT, presence, up_since
from gpufleet.domain.records import (
    ApiKey,
    Attempt,
    AuditEvent,
    GpuStat,
    Job,
    StoredConfig,
    WorkedAttempt,
    Worker,
)
from gpufleet.domain.states import RETRY_DEFAULT, RetryOn, Target, WorkerType, can_delete_worker

_NO_NAMES: Mapping[str, str] = {}
Name = Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """Worker bodies: agents of other versions may send fields we do not know."""

    model_config = ConfigDict(extra="ignore")


# ---- admin ------------------------------------------------------------------------------


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


class WorkerOut(BaseModel):
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
    up_since: datetime | None  # when its open stream opened; None while none is open
    token_issued_at: datetime | None

    @classmethod
    def of(cls, w: Worker) -> WorkerOut:
        seen = presence(w)
        return cls(
            presence=seen.value,
            presence_text=PRESENCE_TEXT[seen],
            up_since=up_since(w),
            token_issued_at=w.token_issued_at,
            id=w.id,
            name=w.name,
            status=w.status.value,
            worker_type=w.worker_type.value,
            gpu_count=w.gpu_count,
            gpu_name=w.gpu_name,
            gpu_vram_gb=w.gpu_vram_gb,
            accelerator_type=w.accelerator_type,
            labels=w.labels,
            admin_labels=w.admin_labels,
            last_heartbeat=w.last_heartbeat,
            current_job_id=w.current_job_id,
            drained=w.drained,
            is_local=w.is_local,
            registered=w.registered,
            deletable=can_delete_worker(w.status, ever_connected=w.ever_connected),
            jobs_run=w.jobs_run,
            created_at=w.created_at,
            connected_at=w.connected_at,
            offline_since=w.offline_since,
            capabilities=w.capabilities,
        )


class GpuStatOut(BaseModel):
    index: int
    utilization_pct: float | None
    memory_used_gb: float | None
    memory_total_gb: float | None


class WorkedAttemptOut(BaseModel):
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
    def of(cls, entry: WorkedAttempt) -> WorkedAttemptOut:
        a = entry.attempt
        return cls(
            job_id=a.job_id,
            attempt_id=a.id,
            number=a.number,
            status=a.status.value,
            job_status=entry.job_status.value,
            config_name=entry.config_name,
            offered_at=a.offered_at,
            started_at=a.started_at,
            ended_at=a.ended_at,
            exit_code=a.exit_code,
            error=a.error,
        )


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
    def of_detail(cls, w: Worker, history: list[WorkedAttempt]) -> WorkerDetail:
        caps = w.capabilities
        return cls(
            **WorkerOut.of(w).model_dump(),
            reported_labels=w.reported_labels,
            agent=w.agent,
            hostname=caps.get("hostname"),
            address=caps.get("address"),
            driver_version=caps.get("driver_version"),
            cuda_version=caps.get("cuda_version"),
            cpu_cores=caps.get("cpu_cores"),
            ram_gb=caps.get("ram_gb"),
            gpus=list(caps.get("gpus") or []),
            gpu_stats=[_gpu_stat(g) for g in w.live_gpu_stats],
            gpu_stats_at=w.gpu_stats_at if w.live_gpu_stats else None,
            history=[WorkedAttemptOut.of(entry) for entry in history],
        )


def _gpu_stat(g: GpuStat) -> GpuStatOut:
    return GpuStatOut(
        index=g.index,
        utilization_pct=g.utilization_pct,
        memory_used_gb=g.memory_used_gb,
        memory_total_gb=g.memory_total_gb,
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
    counts: dict[str, int]
    # Queued jobs (from the head of the queue) that no registered worker can run.
    unmatched_jobs: list[UnmatchedJob]


class CreateApiKey(Strict):
    name: str = Name
    permissions: list[str] = Field(min_length=1, max_length=8)


class ApiKeyOut(BaseModel):
    id: str
    name: str
    permissions: list[str]
    created_at: datetime
    revoked: bool
    last_used_at: datetime | None = None  # to the minute

    @classmethod
    def of(cls, k: ApiKey) -> ApiKeyOut:
        return cls(
            id=k.id,
            name=k.name,
            permissions=sorted(k.permissions),
            created_at=k.created_at,
            revoked=k.revoked,
            last_used_at=k.last_used_at,
        )


class CreatedApiKey(ApiKeyOut):
    key: str


# ---- worker -----------------------------------------------------------------------------


class GpuInfo(Lenient):
    """The SimpleTuner agent's capability shape."""

    name: str | None = Field(None, max_length=256)
    vram_gb: float | None = Field(None, ge=0)
    count: int = Field(0, ge=0, le=1024)
    driver: str | None = Field(None, max_length=128)
    accelerator: str | None = Field(None, max_length=32)


class RegisterIn(Lenient):
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


class HeartbeatIn(Lenient):
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


class StatusOut(BaseModel):
    ok: bool
    job_status: str


class LogLineIn(Lenient):
    stream: Literal["stdout", "stderr"] = "stdout"
    text: str = Field(max_length=65_536)


class LogsIn(Lenient):
    attempt_id: str | None = Field(None, max_length=64)
    # Index of the first line in the attempt's output: a re-sent batch is stored once.
    first: int | None = Field(None, ge=0, le=2**40)
    lines: list[LogLineIn] = Field(max_length=1000)


class WorkerIdIn(Lenient):
    worker_id: str | None = None


# ---- queue ------------------------------------------------------------------------------


class SubmitIn(Strict):
    config_name: str | None = Field(None, max_length=128)
    config: dict[str, Any] | None = None
    target: Target = Target.WORKER
    worker_labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    gpu_count: int | None = Field(None, ge=0, le=1024)
    priority: int = Field(0, ge=-1000, le=1000)
    max_retries: int = Field(3, ge=0, le=100)
    # Retried after: `lost` (the worker went away or stopped the job), `failed` (the process).
    retry_on: list[RetryOn] = Field(default_factory=lambda: sorted(RETRY_DEFAULT), max_length=2)


class AttemptOut(BaseModel):
    id: str
    number: int
    worker_id: str
    status: str
    offered_at: datetime
    acknowledged_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    exit_code: int | None
    worker_name: str | None = None

    @classmethod
    def of(cls, a: Attempt, names: Mapping[str, str] = _NO_NAMES) -> AttemptOut:
        return cls(
            id=a.id,
            number=a.number,
            worker_id=a.worker_id,
            worker_name=names.get(a.worker_id),
            status=a.status.value,
            offered_at=a.offered_at,
            acknowledged_at=a.acknowledged_at,
            started_at=a.started_at,
            ended_at=a.ended_at,
            error=a.error,
            exit_code=a.exit_code,
        )


class JobOut(BaseModel):
    id: str
    job_id: str
    status: str
    config_name: str | None
    target: str
    worker_labels: dict[str, str]
    gpu_count: int
    priority: int
    max_retries: int
    retry_on: list[RetryOn]
    attempts: int
    current_attempt_id: str | None
    worker_id: str | None
    error: str | None
    exit_code: int | None
    progress: dict[str, Any] | None
    submitted_by: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    worker_name: str | None = None  # the worker's name, when it still exists
    submitted_by_name: str | None = None  # the submitting key's name
    rerun_of: str | None = None  # the job this one re-runs

    @classmethod
    def of(cls, j: Job, names: Mapping[str, str] = _NO_NAMES) -> JobOut:
        """`names`: worker ids and actors to names (services.queue.names_of)."""
        return cls(
            worker_name=names.get(j.worker_id) if j.worker_id else None,
            submitted_by_name=names.get(j.submitted_by) if j.submitted_by else None,
            rerun_of=j.rerun_of,
            id=j.id,
            job_id=j.id,
            status=j.status.value,
            config_name=j.config_name,
            target=j.target.value,
            worker_labels=j.worker_labels,
            gpu_count=j.gpu_count,
            priority=j.priority,
            max_retries=j.max_retries,
            retry_on=sorted(j.retry_on),
            attempts=j.attempts,
            current_attempt_id=j.current_attempt_id,
            worker_id=j.worker_id,
            error=j.error,
            exit_code=j.exit_code,
            progress=j.progress,
            submitted_by=j.submitted_by,
            created_at=j.created_at,
            updated_at=j.updated_at,
            started_at=j.started_at,
            ended_at=j.ended_at,
        )


class JobDetail(JobOut):
    config: dict[str, Any]
    attempt_history: list[AttemptOut]
    waiting: dict[str, Any] | None
    rerun_as: list[str] = Field(default_factory=list)  # the jobs that re-run this one


class JobIds(Strict):
    job_ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(max_length=1000)


class BulkResult(BaseModel):
    job_id: str
    ok: bool
    job: JobOut | None  # cancel: the job; re-run: the new job
    error: str | None  # why this one was not done, in words


class BulkOut(BaseModel):
    results: list[BulkResult]
    done: int
    failed: int


class JobList(BaseModel):
    jobs: list[JobOut]
    total: int
    limit: int
    offset: int


class LogLineOut(BaseModel):
    seq: int
    attempt_id: str
    stream: str
    text: str
    ts: datetime


class LogsOut(BaseModel):
    job_id: str
    lines: list[LogLineOut]
    next_after: int
    # Pass as `before` to read the lines preceding this page; null at the log's first line.
    next_before: int | None = None


class ConfigOut(BaseModel):
    name: str
    config: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, c: StoredConfig) -> ConfigOut:
        return cls(name=c.name, config=c.body, created_at=c.created_at, updated_at=c.updated_at)


class ConfigList(BaseModel):
    configs: list[ConfigOut]


class AuditOut(BaseModel):
    id: int
    ts: datetime
    event_type: str
    actor: str
    target: str | None
    client_addr: str | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, e: AuditEvent) -> AuditOut:
        return cls(
            id=e.id,
            ts=e.ts,
            event_type=e.event_type,
            actor=e.actor,
            target=e.target,
            client_addr=e.client_addr,
            detail=e.detail,
        )


class AuditList(BaseModel):
    events: list[AuditOut]
    total: int
    limit: int
    offset: int
    actor_names: dict[str, str] = {}  # actor (`key:k_…`, `worker:w_…`) -> its name
    hint: str | None = None  # when nothing matches: what may be why


class SeqGap(BaseModel):
    first: int
    last: int


class AuditVerification(BaseModel):
    """The audit chain checked; every field but `checked` and the heads is a finding."""

    ok: bool  # no finding
    checked: int  # entries that verified, in order from the first, before any break
    unsealed: int  # entries without a seal: written around the server (tampering)
    unsealed_ids: list[int]  # the first 20 of them
    gaps: list[SeqGap]  # runs of missing chain positions (the first 100)
    missing: int  # chain positions missing in all
    chain_head: int  # the last chain position in the database
    recorded_head: int | None  # the last position this server recorded outside it
    head_behind: bool  # the database no longer holds the recorded head: its end was cut
    first_broken: dict[str, Any] | None  # the first missing or changed entry

    @classmethod
    def of(cls, v: audit_chain.Verdict) -> AuditVerification:
        broken = v.first_broken
        return cls(
            ok=v.ok,
            checked=v.checked,
            unsealed=v.unsealed,
            unsealed_ids=list(v.unsealed_ids),
            gaps=[SeqGap(first=g.first, last=g.last) for g in v.gaps],
            missing=v.missing,
            chain_head=v.chain_head,
            recorded_head=v.recorded_head,
            head_behind=v.head_behind,
            first_broken=None
            if broken is None
            else {"seq": broken.seq, "event_id": broken.event_id, "reason": broken.reason},
        )


class ErrorOut(BaseModel):
    detail: str  # what happened and what to do next


class ValidationErrorOut(ErrorOut):
    errors: list[dict[str, Any]] = Field(default_factory=list)  # field by field, when known


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "The body could not be read as JSON"},
    401: {"model": ErrorOut, "description": "No valid credentials"},
    403: {"model": ErrorOut, "description": "The credentials lack the permission"},
    404: {"model": ErrorOut, "description": "No such worker, job, config or key"},
    409: {"model": ErrorOut, "description": "The current state forbids this"},
    413: {"model": ErrorOut, "description": "The body is over 4 MiB"},
    422: {"model": ValidationErrorOut, "description": "The input says something impossible"},
    429: {"model": ErrorOut, "description": "Too many failed authentications"},
}


SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "JSON, or with follow / on the stream endpoints Server-Sent Events",
        "content": {"text/event-stream": {"schema": {"type": "object"}}},
    }
}


class Ok(BaseModel):
    ok: bool = True


# ---- progress history (charts) ------------------------------------------------------------


class SeriesOut(BaseModel):
    name: str
    points: list[tuple[int, float, int]] = Field(
        description="[step, value, attempt number], oldest first"
    )


class ProgressHistoryOut(BaseModel):
    job_id: str
    status: str
    step: int | None
    total: int | None
    rate: float | None = Field(description="steps a second, over the latest points")
    eta_s: float | None = Field(description="seconds left at that rate, while running")
    updated_at: datetime | None = Field(description="when the latest progress was recorded")
    capacity: int = Field(description="the most points kept per series")
    series: list[SeriesOut]
