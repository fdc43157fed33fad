"""The queue: submit and follow jobs, their attempts, logs, progress and saved configs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, Field

from gpufleet.domain import bounds, idempotency, job_secrets, outcomes
from gpufleet.domain.dependencies import MAX_DEPENDENCIES as MAX_DEPS
from gpufleet.domain.dependencies import On
from gpufleet.domain.levels import ADMIN_USER_ID
from gpufleet.domain.records import Attempt, Checkpoint, ConfigVersion, Job, StoredConfig
from gpufleet.domain.states import RETRY_DEFAULT, RetryOn, Target
from gpufleet.server.schemas.base import Record, Strict
from gpufleet.server.schemas.sweeps import SweepFields

_NO_NAMES: Mapping[str, str] = {}


class DependsOnIn(Strict):
    """A dependency with its condition: run once `job` completed (or ended, however)."""

    job: str = Field(max_length=64)
    on: On = On.COMPLETED


class SubmitIn(SweepFields):  # with `sweep`: a sweep of jobs (schemas/sweeps.py)
    config_name: str | None = Field(None, max_length=128)
    config: dict[str, Any] | None = None
    target: Target = Target.WORKER
    worker_labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    gpu_count: int | None = Field(None, ge=0, le=1024)
    # None: the submitting user's level's default (admin 30, lead 20, researcher 10, viewer 0)
    priority: int | None = Field(None, ge=-1000, le=1000)
    max_retries: int = Field(3, ge=0, le=100)
    # Retried after: `lost` (the worker went away or stopped the job), `failed` (the process).
    retry_on: list[RetryOn] = Field(default_factory=lambda: sorted(RETRY_DEFAULT), max_length=2)
    team: str | None = Field(None, min_length=1, max_length=64, description="id or name")
    preemptible: bool | None = None  # None: as its team says
    # The jobs it runs after (docs/jobs.md, Dependencies), and what it takes from them.
    depends_on: list[str | DependsOnIn] = Field(default_factory=list, max_length=MAX_DEPS)
    inputs: dict[str, list[str]] = Field(default_factory=dict, max_length=MAX_DEPS)

    def after(self) -> list[str | dict[str, str]]:
        return [d if isinstance(d, str) else d.model_dump(mode="json") for d in self.depends_on]

    # A second submit of it by the same user within 24 hours answers the first's job
    # (domain/idempotency.py checks what it holds).
    idempotency_key: str | None = Field(None, max_length=idempotency.KEY_MAX)


class RerunIn(Strict):
    """Edit and re-run (the Train page's editor): each field sent replaces the old job's;
    one not sent (or null) is kept. An edited config is checked as a submit's is."""

    config: dict[str, Any] | None = None
    target: Target | None = None
    worker_labels: dict[str, str] | None = Field(None, max_length=64)
    gpu_count: int | None = Field(None, ge=0, le=1024)
    priority: int | None = Field(None, ge=-1000, le=1000)
    max_retries: int | None = Field(None, ge=0, le=100)


class ResumedFromOut(BaseModel):
    """Where an attempt resumed: "resumed from checkpoint-1200 (attempt 2)"."""

    checkpoint: str  # the checkpoint's name
    step: int | None
    attempt_number: int  # of the attempt that wrote it

    @classmethod
    def of(cls, c: Checkpoint | None) -> Self | None:
        if c is None:
            return None
        return cls(checkpoint=c.name, step=c.step, attempt_number=c.attempt_number or 0)


_NO_CHECKPOINTS: Mapping[str, Checkpoint] = {}


class AttemptOut(Record):
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
    resumed_from: ResumedFromOut | None = None  # the checkpoint its offer resumed from

    @classmethod
    def of(
        cls,
        a: Attempt,
        names: Mapping[str, str] = _NO_NAMES,
        checkpoints: Mapping[str, Checkpoint] = _NO_CHECKPOINTS,
    ) -> Self:
        """`checkpoints`: by id, those the attempts resumed from."""
        resumed = checkpoints.get(a.resumed_from) if a.resumed_from else None
        return cls.over(
            a, worker_name=names.get(a.worker_id), resumed_from=ResumedFromOut.of(resumed)
        )


class JobOut(Record):
    id: str
    job_id: str
    status: str
    config_name: str | None
    target: str
    worker_labels: dict[str, str]
    gpu_count: int  # on each node
    nodes: int  # the machines it runs on: more than 1, a multi-node (gang) job (docs/jobs.md)
    priority: int
    max_retries: int
    retry_on: list[RetryOn]
    attempts: int
    current_attempt_id: str | None
    worker_id: str | None
    error: str | None
    # `error` is why its last attempt ended, as it waits or runs again (a note, not a
    # failure: `domain.outcomes.error_is_note`).
    error_is_note: bool = False
    exit_code: int | None
    # The job's whole progress; in a list (`listed`), only its step and total.
    progress: dict[str, Any] | None
    submitted_by: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    worker_name: str | None = None  # the worker's name, when it still exists
    submitted_by_name: str | None = None  # the submitting key's name
    rerun_of: str | None = None  # the job this one re-runs
    user: str | None = None  # who submitted it (the user's name; its id when deleted)
    team: str | None = None  # for which team (its name; its id when deleted)
    user_id: str | None = None
    team_id: str | None = None
    approved_by: str | None = None  # the actor who approved it, when a rule held it
    approved_by_name: str | None = None  # the approving key's name
    rejected_by: str | None = None  # the actor who rejected it (`error` says why)
    rejected_by_name: str | None = None  # the rejecting key's name
    preemptible: bool | None = None  # None: as its team says
    # What the caller may do to it now (`domain.ownership.JobAction`'s values), in the
    # answers of GET /api/queue and GET /api/queue/{id}; None in the others.
    actions: list[str] | None = None
    config_version: int | None = None  # the stored config's version it ran
    config_digest: str | None = None  # that version's sha256 (canonical JSON)
    config_written_by: str | None = None  # who wrote that version (name; id once deleted)
    config_written_by_id: str | None = None
    waits_on: str | None = None  # the dependency it waits on (docs/jobs.md, Dependencies)
    inputs: dict[str, list[str]] | None = None  # the artifacts it takes from its dependencies
    sweep_id: str | None = None  # the sweep it is a point of (GET /api/sweeps/{id})

    @classmethod
    def of(
        cls, j: Job, names: Mapping[str, str] = _NO_NAMES, actions: list[str] | None = None
    ) -> Self:
        """`names`: worker, user and team ids and actors to names (services.queue.names_of);
        `actions`: what the caller may do to it (services.ownership.actions_on)."""
        return cls._read(j, names, actions=actions)

    @classmethod
    def listed(
        cls, j: Job, names: Mapping[str, str] = _NO_NAMES, actions: list[str] | None = None
    ) -> Self:
        """The job as a list shows it: its progress cut to step and total (a progress may
        be 16 KiB; a page of 500 jobs would carry 8 MiB of it)."""
        return cls._read(j, names, actions=actions, progress=bounds.progress_summary(j.progress))

    @classmethod
    def _read(cls, j: Job, names: Mapping[str, str], **more: object) -> Self:
        return cls.over(
            j,
            **more,
            job_id=j.id,
            retry_on=sorted(j.retry_on),
            error_is_note=j.error is not None and outcomes.error_is_note(j.status),
            worker_name=names.get(j.worker_id) if j.worker_id else None,
            submitted_by_name=names.get(j.submitted_by) if j.submitted_by else None,
            approved_by_name=names.get(j.approved_by) if j.approved_by else None,
            rejected_by_name=names.get(j.rejected_by) if j.rejected_by else None,
            user=names.get(j.user_id, j.user_id) if j.user_id else None,
            team=names.get(j.team_id, j.team_id) if j.team_id else None,
            config_written_by=(
                names.get(j.config_written_by, j.config_written_by) if j.config_written_by else None
            ),
            config_written_by_id=j.config_written_by,
        )


class SubmitOut(JobOut):
    """A submit's answer: the job, and whether its idempotency key named it already (an
    earlier submit made it: 200, where a new job is 201)."""

    idempotent_hit: bool = False


class UnheardOut(Record):
    """Its live attempt's worker has lost its stream (`domain.presence.attempt_unheard`)."""

    worker_id: str
    presence: str
    text: str
    requeue_due: datetime | None


class JobDetail(JobOut):
    config: dict[str, Any]
    attempt_history: list[AttemptOut]
    waiting: dict[str, Any] | None
    rerun_as: list[str] = Field(default_factory=list)  # the jobs that re-run this one
    worker_unheard: UnheardOut | None = None
    # what it cost on pool workers to date, at their pools' price_per_hour (docs/capacity.md);
    # null when it never ran on a pool's worker
    cost: float | None = None
    # Its dependencies ({"job", "on", "status"}, in the submit's order) and its dependents
    # ({"job", "status"}): docs/jobs.md, Dependencies
    depends_on: list[dict[str, str]] = Field(default_factory=list)
    dependents: list[dict[str, str]] = Field(default_factory=list)


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
    node: int = 0  # the rank of the node that printed it (a multi-node job's; else 0)


class LogsOut(BaseModel):
    job_id: str
    nodes: int = 1  # the job's nodes: a multi-node job's log may be read a node at a time
    lines: list[LogLineOut]
    next_after: int
    # Pass as `before` to read the lines preceding this page; null at the log's first line.
    next_before: int | None = None
    # Lines follow this page (it stopped at `limit` or at 4 MiB of text): read on with
    # `after=next_after`. Always false for a page read back (`before`).
    more: bool = False


class ConfigOut(Record):
    """A stored config as its latest version has it."""

    name: str
    config: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    version: int = Field(description="the latest version's number, from 1")
    digest: str = Field(description="sha256 of the config's canonical JSON (keys sorted)")
    owner: str = Field(description="who created it: may change it (its id once deleted)")
    owner_id: str
    team: str | None = Field(description="the team it is shared with: its leads may change it")
    team_id: str | None
    written_by: str | None = Field(description="who wrote the latest version (a user)")
    written_by_id: str | None

    @classmethod
    def of(cls, c: StoredConfig, names: Mapping[str, str] = _NO_NAMES, viewer_id: str = "") -> Self:
        """`names`: user and team ids to names (services.configs); credential-looking env
        values are masked for anyone but the config's owner (`viewer_id`: who reads it;
        left out, for everyone)."""
        return cls.over(
            c,
            config=job_secrets.shown(c.body, c.owner_id, viewer_id),
            owner=names.get(c.owner_id, c.owner_id),
            team=names.get(c.team_id, c.team_id) if c.team_id else None,
            written_by=names.get(c.written_by, c.written_by) if c.written_by else None,
            written_by_id=c.written_by,
        )


class ConfigList(BaseModel):
    configs: list[ConfigOut]


class ConfigVersionOut(Record):
    """One version of a stored config; its body is read one version at a time."""

    name: str
    version: int
    digest: str
    written_by: str | None  # the user's name (its id once deleted); null: before versions
    written_by_id: str | None
    written_at: datetime
    config: dict[str, Any] | None = None  # only when one version is read

    @classmethod
    def of(
        cls, v: ConfigVersion, names: Mapping[str, str] = _NO_NAMES, *, viewer_id: str | None = None
    ) -> Self:
        """`viewer_id`: who reads its body (None: the body is left out); credential-looking
        env values are masked for anyone but the version's writer (the admin's, before)."""
        owner = v.written_by or ADMIN_USER_ID
        return cls.over(
            v,
            written_by=names.get(v.written_by, v.written_by) if v.written_by else None,
            written_by_id=v.written_by,
            config=None if viewer_id is None else job_secrets.shown(v.body, owner, viewer_id),
        )


class ConfigVersionList(BaseModel):
    name: str
    versions: list[ConfigVersionOut]  # newest first
    limit: int
    offset: int


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
