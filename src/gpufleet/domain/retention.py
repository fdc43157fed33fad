"""What the retention sweep deletes: a pure decision over what the store holds.

Three rules, applied by `services/retention.py`:
- a job that ended more than the retention period ago loses every artifact and checkpoint,
  unless an admin pinned it (a period of None keeps everything forever);
- a job keeps only its newest `keep_checkpoints` committed checkpoints (0 keeps them all);
  an older one goes with its files, except one an active attempt resumed from, and (a
  multi-node job's) the newest checkpoint every node completed: the one a requeued gang
  resumes from (`node_checkpoints.resume_choice`). Incomplete ones newer than it count
  towards the newest N (they are kept or not by age like any other), but never push it out:
  it is kept beside them;
- an object staged under `incoming/` (a presigned upload never finished) goes after a day.

A pinned job is never touched: pinning says "keep what this job made", checkpoints included.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from gpufleet.domain import node_checkpoints

CHECKPOINT_KIND = "checkpoint"
STAGING_MAX_AGE = timedelta(days=1)


class StoredFile(Protocol):
    """An artifact row, as far as retention cares."""

    @property
    def id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def attempt_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def checkpoint(self) -> str | None: ...


class CommittedCheckpoint(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def attempt_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class JobFacts:
    """A job that holds artifacts: when it ended (None: it has not), whether it is pinned,
    the checkpoints its active attempts resumed from (never deleted under them), and its
    nodes (a gang's checkpoints are complete once every node committed its part)."""

    id: str
    ended_at: datetime | None
    pinned: bool = False
    resumed_from: frozenset[str] = frozenset()
    nodes: int = 1


@dataclass(frozen=True, slots=True)
class StagedObject:
    key: str
    modified: datetime


@dataclass(frozen=True, slots=True)
class Policy:
    retention: timedelta | None  # None: keep forever
    keep_checkpoints: int  # per job, the newest kept; 0: keep every one

    @classmethod
    def of(cls, retention_days: float, keep_checkpoints: int) -> Policy:
        """From the server's settings: 0 days keeps forever, 0 checkpoints keeps them all."""
        retention = timedelta(days=retention_days) if retention_days > 0 else None
        return cls(retention, keep_checkpoints)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to delete, by id and key; `expired_jobs` lost everything to the period."""

    artifact_ids: frozenset[str] = frozenset()
    checkpoint_ids: frozenset[str] = frozenset()
    staged_keys: tuple[str, ...] = ()
    expired_jobs: frozenset[str] = frozenset()
    by_job: dict[str, frozenset[str]] = field(default_factory=dict)  # job → its artifact ids

    @property
    def empty(self) -> bool:
        return not (self.artifact_ids or self.checkpoint_ids or self.staged_keys)


def expired(job: JobFacts, now: datetime, policy: Policy) -> bool:
    """Whether the job's files have outlived the retention period."""
    if job.pinned or job.ended_at is None or policy.retention is None:
        return False
    return job.ended_at <= now - policy.retention


def plan(
    now: datetime,
    policy: Policy,
    jobs: Iterable[JobFacts],
    artifacts: Iterable[StoredFile],
    checkpoints: Iterable[CommittedCheckpoint],
    staged: Iterable[StagedObject] = (),
    parts: Mapping[str, Collection[int]] | None = None,
) -> Plan:
    """The deletions the rules call for; jobs not in `jobs` are left alone. `parts`: the
    ranks that committed their part of each multi-node job's checkpoint, by its id."""
    facts = {job.id: job for job in jobs}
    gone_jobs = {job_id for job_id, job in facts.items() if expired(job, now, policy)}
    by_job: dict[str, list[CommittedCheckpoint]] = {}
    for ck in checkpoints:
        if ck.job_id in facts:
            by_job.setdefault(ck.job_id, []).append(ck)
    gone_checkpoints: set[str] = set()
    gone_names: set[tuple[str, str]] = set()  # (attempt, checkpoint name) of pruned ones
    for job_id, held in by_job.items():
        if job_id in gone_jobs:
            gone_checkpoints.update(ck.id for ck in held)
        elif not facts[job_id].pinned:
            surplus = surplus_checkpoints(held, policy.keep_checkpoints, facts[job_id], parts)
            for ck in surplus:
                gone_checkpoints.add(ck.id)
                gone_names.add((ck.attempt_id, ck.name))
    doomed: dict[str, set[str]] = {}
    for art in artifacts:
        if art.job_id in gone_jobs or (
            art.kind == CHECKPOINT_KIND
            and art.checkpoint is not None
            and (art.attempt_id, art.checkpoint) in gone_names
        ):
            doomed.setdefault(art.job_id, set()).add(art.id)
    stale = tuple(sorted(o.key for o in staged if o.modified <= now - STAGING_MAX_AGE))
    return Plan(
        artifact_ids=frozenset(a for ids in doomed.values() for a in ids),
        checkpoint_ids=frozenset(gone_checkpoints),
        staged_keys=stale,
        expired_jobs=frozenset(gone_jobs),
        by_job={job_id: frozenset(ids) for job_id, ids in doomed.items()},
    )


def surplus_checkpoints(
    held: Sequence[CommittedCheckpoint],
    keep: int,
    job: JobFacts,
    parts: Mapping[str, Collection[int]] | None = None,
) -> list[CommittedCheckpoint]:
    """The job's checkpoints past the newest `keep` (0: none are), sparing those an active
    attempt resumed from and a gang's newest complete one (every node's part in `parts`)."""
    if keep <= 0:
        return []
    newest_first = sorted(held, key=lambda ck: (ck.created_at, ck.id), reverse=True)
    spared = set(job.resumed_from)
    if job.nodes > 1:
        whole = node_checkpoints.resume_choice(newest_first, job.nodes, parts or {})
        if whole is not None:
            spared.add(whole.id)
    return [ck for ck in newest_first[keep:] if ck.id not in spared]
