"""Frozen records passed between the store, the services and the routes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.levels import Level
from gpufleet.domain.matching import Capacity, Feature, Requirement, needs_of, parse_features
from gpufleet.domain.states import (
    AttemptStatus,
    JobStatus,
    NodeState,
    RetryOn,
    Target,
    WorkerStatus,
    WorkerType,
)

LOCAL_WORKER_ID = "w_local"


@dataclass(frozen=True, slots=True)
class GpuStat:
    """One GPU's load as a heartbeat reported it (NVML, or nvidia-smi)."""

    index: int
    utilization_pct: float | None  # of the last sample period, 0-100
    memory_used_gb: float | None
    memory_total_gb: float | None
    temperature_c: float | None = None  # from its health reading (domain/gpu_health.py)
    throttle: str | None = None  # its active clock throttle reasons, in words


@dataclass(frozen=True, slots=True)
class GpuFault:
    """A GPU its worker no longer offers (domain/gpu_health.py `fault_of`), and why."""

    index: int
    reason: str


def effective_labels(reported: dict[str, str], admin: dict[str, str]) -> dict[str, str]:
    """The labels matching uses: the worker's own, and the admin's over them. On a clash the
    admin label wins: an admin can correct or pin what a machine says of itself, and a worker
    cannot take itself out of (or into) a pool an admin put it in."""
    return {**reported, **admin}


@dataclass(frozen=True, slots=True)
class Worker:
    id: str
    name: str
    status: WorkerStatus
    worker_type: WorkerType
    type_set_by_admin: bool
    labels: dict[str, str]  # what the dispatcher matches: reported labels under admin labels
    admin_labels: dict[str, str]
    drained: bool
    is_local: bool
    registered: bool
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    capabilities: dict[str, Any]
    current_job_id: str | None
    current_attempt_id: str | None
    stream_owner: str | None
    jobs_run: int
    created_at: datetime
    last_heartbeat: datetime | None
    connected_at: datetime | None
    offline_since: datetime | None
    gpu_stats: tuple[GpuStat, ...] = ()  # the newest sample; () when the agent sends none
    gpu_stats_at: datetime | None = None
    reported_labels: dict[str, str] = field(default_factory=dict)  # as the worker sent them
    token_issued_at: datetime | None = None  # when its live token was made (create, rotate)
    # held for the gang at the head of the queue (domain/gang.py): the job, since, in words
    held_for: str | None = None
    held_since: datetime | None = None
    held_note: str | None = None
    gpu_faults: tuple[GpuFault, ...] = ()  # its faulty GPUs, until it registers again
    preflight_error: str | None = None  # its preflight's output while it fails: unhealthy
    drain_reason: str | None = None  # why it was drained (the circuit breaker says)
    infra_failures: int = 0  # attempts in a row ended by infrastructure failure

    @property
    def offline(self) -> bool:
        return self.offline_since is not None

    @property
    def ever_connected(self) -> bool:
        """Whether an agent has ever used the token: registered, or opened a stream."""
        return self.registered or self.stream_owner is not None

    @property
    def agent(self) -> str:
        """The agent in words, from what it sent at registration: `gpufleet/0.1.0` is
        "gpufleet 0.1.0"; an agent that names none is SimpleTuner's (it never does)."""
        if not self.registered:
            return "not registered yet"
        sent = self.capabilities.get("agent")
        if not isinstance(sent, str) or not sent:
            return "SimpleTuner agent"
        return sent.replace("/", " ", 1)

    @property
    def live_gpu_stats(self) -> tuple[GpuStat, ...]:
        """The newest GPU sample, while the worker is online (an old one would mislead)."""
        return () if self.offline else self.gpu_stats

    @property
    def spent(self) -> bool:
        return self.worker_type is WorkerType.EPHEMERAL and self.jobs_run >= 1

    def capacity(self) -> Capacity:
        return Capacity(
            worker_id=self.id,
            name=self.name,
            status=self.status,
            gpu_count=self.gpu_count if self.registered else None,
            labels=self.labels,
            is_local=self.is_local,
            worker_type=self.worker_type,
            spent=self.spent,
            current_job_id=self.current_job_id,
            features=self.features if self.registered else None,
            unhealthy=self.preflight_error is not None and not self.drained,
        )

    @property
    def features(self) -> frozenset[Feature]:
        return parse_features(self.capabilities.get("features"))


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    status: JobStatus
    config_name: str | None
    config: dict[str, Any]
    target: Target
    worker_labels: dict[str, str]
    gpu_count: int
    priority: int
    max_retries: int
    retry_on: frozenset[RetryOn]
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
    rerun_of: str | None = None  # the job this one re-runs
    artifacts_pinned: bool = False  # its artifacts outlive the retention sweep
    user_id: str | None = None  # who submitted it (docs/scheduling.md)
    team_id: str | None = None  # for which team; None: its user is in none
    preemptible: bool | None = None  # may be preempted; None: as its team says
    approved_by: str | None = None  # the actor who approved it, when a rule held it
    rejected_by: str | None = None  # the actor who rejected it (its `error` says why)
    config_version: int | None = None  # the stored config's version it ran, digest, writer
    config_digest: str | None = None
    config_written_by: str | None = None
    workdir: str | None = None  # the sha256 hex of the snapshot its config names (docs/jobs.md)
    nodes: int = 1  # the machines it runs on (jobspec.gang_shape): more than 1, a gang
    waits_on: str | None = None  # the dependency it waits on (domain/dependencies.py)
    has_dependents: bool = False  # some job depends on it
    # the artifacts it takes from its dependencies: job id to glob patterns (docs/jobs.md)
    inputs: dict[str, list[str]] | None = None
    sweep_id: str | None = None  # the sweep it is a point of (domain/sweeps.py)

    @property
    def total_gpus(self) -> int:
        """The GPUs it holds on all its nodes: what limits, fair share and usage count."""
        return GangShape(self.nodes, self.gpu_count).total_gpus

    def requirement(self) -> Requirement:
        return Requirement(
            target=self.target,
            gpu_count=self.gpu_count,
            labels=self.worker_labels,
            needs=needs_of(self.config, inputs=bool(self.inputs)),
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    id: str
    job_id: str
    worker_id: str
    number: int
    status: AttemptStatus
    offered_at: datetime
    acknowledged_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    exit_code: int | None
    resumed_from: str | None = None  # the checkpoint (id) its offer said to resume from
    preempted_by: str | None = None  # the queued job it is being stopped for
    preempt_at: datetime | None = None  # when it was asked to stop for it


@dataclass(frozen=True, slots=True)
class AttemptNode:
    """One node of a gang's attempt: its rank (0 first), its worker, where it stands in the
    two-phase start; `address` and `port` (rank 0's MASTER_PORT) come from the rendezvous."""

    attempt_id: str
    rank: int
    job_id: str
    number: int  # the attempt's number
    worker_id: str
    state: NodeState
    offered_at: datetime
    acknowledged_at: datetime | None = None
    address: str | None = None
    port: int | None = None
    ended_at: datetime | None = None
    error: str | None = None


class ArtifactKind(StrEnum):
    ARTIFACT = "artifact"
    CHECKPOINT = "checkpoint"  # a file of a checkpoint folder


@dataclass(frozen=True, slots=True)
class Artifact:
    """A job's file in the artifact store, listed only once verified (docs/artifacts.md)."""

    id: str
    job_id: str
    attempt_id: str
    path: str  # relative to the job folder
    kind: ArtifactKind
    checkpoint: str | None  # the checkpoint's name, for a checkpoint file
    size: int
    sha256: str
    key: str  # where the store keeps it (artifacts.keys.artifact_key)
    created_at: datetime
    attempt_number: int | None = None  # when read with its attempt


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint folder whose every file is stored: a later attempt can resume from it."""

    id: str
    job_id: str
    attempt_id: str
    name: str  # the folder's name, checkpoint-1200
    path: str  # the folder, relative to the job folder
    step: int | None
    files: int
    size: int
    created_at: datetime
    attempt_number: int | None = None  # when read with its attempt


@dataclass(frozen=True, slots=True)
class WorkedAttempt:
    """A line of a worker's job history: one attempt it was offered, and its job."""

    attempt: Attempt
    config_name: str | None
    job_status: JobStatus


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    name: str
    permissions: frozenset[str]
    created_at: datetime
    revoked: bool
    last_used_at: datetime | None = None
    user_id: str | None = None  # whose key it is (the built-in admin's, for keys before #18)


@dataclass(frozen=True, slots=True)
class User:
    """A person (or a script's owner): their keys' holder, in teams, at a level."""

    id: str
    name: str
    level: Level
    default_team_id: str | None
    max_gpus: int | None  # this user's own limits, over the policy's per-user ones
    max_jobs: int | None
    max_queued: int | None
    usage: float  # decayed GPU-seconds, over all teams, as of `usage_at`
    usage_at: datetime | None
    created_at: datetime
    service: bool = False  # automation's owner: its keys work under --oidc-only


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    name: str
    weight: float  # its share of the fleet, against the other teams' weights
    max_gpus: int | None
    max_jobs: int | None
    preemptible: bool  # its jobs may be preempted
    can_preempt: bool  # its jobs may preempt
    usage: float  # decayed GPU-seconds, as of `usage_at`
    usage_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Member:
    team_id: str
    user_id: str
    usage: float  # the user's decayed GPU-seconds inside the team
    usage_at: datetime | None


@dataclass(frozen=True, slots=True)
class UsageSample:
    team_id: str
    at: datetime
    running_gpus: int
    usage: float


@dataclass(frozen=True, slots=True)
class StoredConfig:
    """A stored config as its latest version has it (domain/ownership.py: who may change it)."""

    name: str
    body: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    owner_id: str  # who created it
    team_id: str | None  # the team it is shared with
    version: int  # the latest version's number, from 1
    digest: str  # domain.jobspec.config_digest of `body`
    written_by: str | None  # the user who wrote the latest version; None: before 0016


@dataclass(frozen=True, slots=True)
class ConfigVersion:
    name: str
    version: int
    body: dict[str, Any]
    digest: str
    written_by: str | None  # a user id; None: written before versions were kept
    written_at: datetime


@dataclass(frozen=True, slots=True)
class AuditEvent:
    id: int
    ts: datetime
    event_type: str
    actor: str
    target: str | None
    client_addr: str | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int
    attempt_id: str
    stream: str
    text: str
    ts: datetime
    node: int = 0  # the rank of the node that printed it (a multi-node job's)
