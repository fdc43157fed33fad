"""Rows as records: each mapper reads a result row by column name (a SQLAlchemy
`RowMapping`, or a plain dict of the same columns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.levels import Level
from gpufleet.domain.records import (
    ApiKey,
    Artifact,
    ArtifactKind,
    Attempt,
    AuditEvent,
    Checkpoint,
    GpuStat,
    Job,
    Member,
    Team,
    User,
    Worker,
    effective_labels,
)
from gpufleet.domain.states import (
    AttemptStatus,
    JobStatus,
    RetryOn,
    Target,
    WorkerStatus,
    WorkerType,
)
from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Subscription, Webhook
from gpufleet.store.tables import jobs

# A row by column name: SQLAlchemy's `RowMapping` (its keys may also be the Column objects),
# or a dict of the same names.
Columns = Mapping[Any, Any]


def of_table(table: sa.Table, m: Columns) -> dict[str, Any]:
    """`table`'s columns of a row that joins several tables, by their names."""
    return {c.name: m[c] for c in table.c}


def new_job(values: Mapping[str, Any]) -> Job:
    """The job a row of these values makes: the columns not given are empty."""
    return job({**_EMPTY_JOB, **values})


_EMPTY_JOB: dict[str, Any] = {column.name: None for column in jobs.c}


def worker(m: Columns) -> Worker:
    admin = dict(m["admin_labels"])
    reported = dict(m["reported_labels"])
    return Worker(
        id=m["id"],
        name=m["name"],
        status=WorkerStatus(m["status"]),
        worker_type=WorkerType(m["worker_type"]),
        type_set_by_admin=m["type_set_by_admin"],
        labels=effective_labels(reported, admin),
        admin_labels=admin,
        drained=m["drained"],
        is_local=m["is_local"],
        registered=m["registered"],
        gpu_count=m["gpu_count"],
        gpu_name=m["gpu_name"],
        gpu_vram_gb=m["gpu_vram_gb"],
        accelerator_type=m["accelerator_type"],
        capabilities=dict(m["capabilities"]),
        current_job_id=m["current_job_id"],
        current_attempt_id=m["current_attempt_id"],
        stream_owner=m["stream_owner"],
        jobs_run=m["jobs_run"],
        created_at=m["created_at"],
        last_heartbeat=m["last_heartbeat"],
        connected_at=m["connected_at"],
        offline_since=m["offline_since"],
        gpu_stats=tuple(GpuStat(**g) for g in m["gpu_stats"] or ()),
        gpu_stats_at=m["gpu_stats_at"],
        reported_labels=reported,
        token_issued_at=m["token_issued_at"],
    )


def job(m: Columns) -> Job:
    return Job(
        id=m["id"],
        status=JobStatus(m["status"]),
        config_name=m["config_name"],
        config=dict(m["config"]),
        target=Target(m["target"]),
        worker_labels=dict(m["worker_labels"]),
        gpu_count=m["gpu_count"],
        priority=m["priority"],
        max_retries=m["max_retries"],
        retry_on=frozenset(RetryOn(v) for v in m["retry_on"]),
        attempts=m["attempts"],
        current_attempt_id=m["current_attempt_id"],
        worker_id=m["worker_id"],
        error=m["error"],
        exit_code=m["exit_code"],
        progress=m["progress"],
        submitted_by=m["submitted_by"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        rerun_of=m["rerun_of"],
        artifacts_pinned=bool(m["artifacts_pinned"]),
        user_id=m["user_id"],
        team_id=m["team_id"],
        preemptible=m["preemptible"],
        approved_by=m["approved_by"],
        config_version=m["config_version"],
        config_digest=m["config_digest"],
        config_written_by=m["config_written_by"],
    )


def attempt(m: Columns) -> Attempt:
    return Attempt(
        id=m["id"],
        job_id=m["job_id"],
        worker_id=m["worker_id"],
        number=m["number"],
        status=AttemptStatus(m["status"]),
        offered_at=m["offered_at"],
        acknowledged_at=m["acknowledged_at"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        error=m["error"],
        exit_code=m["exit_code"],
        resumed_from=m["resumed_from"],
        preempted_by=m.get("preempted_by"),
        preempt_at=m.get("preempt_at"),
    )


def artifact(m: Columns) -> Artifact:
    return Artifact(
        id=m["id"],
        job_id=m["job_id"],
        attempt_id=m["attempt_id"],
        path=m["path"],
        kind=ArtifactKind(m["kind"]),
        checkpoint=m["checkpoint"],
        size=m["size"],
        sha256=m["sha256"],
        key=m["key"],
        created_at=m["created_at"],
        attempt_number=m.get("attempt_number"),
    )


def checkpoint(m: Columns) -> Checkpoint:
    return Checkpoint(
        id=m["id"],
        job_id=m["job_id"],
        attempt_id=m["attempt_id"],
        name=m["name"],
        path=m["path"],
        step=m["step"],
        files=m["files"],
        size=m["size"],
        created_at=m["created_at"],
        attempt_number=m.get("attempt_number"),
    )


def audit_event(m: Columns) -> AuditEvent:
    return AuditEvent(
        id=m["id"],
        ts=m["ts"],
        event_type=m["event_type"],
        actor=m["actor"],
        target=m["target"],
        client_addr=m["client_addr"],
        detail=dict(m["detail"]),
    )


def api_key(m: Columns) -> ApiKey:
    return ApiKey(
        id=m["id"],
        name=m["name"],
        permissions=frozenset(m["permissions"]),
        created_at=m["created_at"],
        revoked=m["revoked_at"] is not None,
        last_used_at=m["last_used_at"],
        user_id=m["user_id"],
    )


def webhook(m: Columns) -> Webhook:
    return Webhook(
        id=m["id"],
        url=m["url"],
        events=frozenset(Subscription(e) for e in m["events"]),
        secret_sealed=m["secret_sealed"],
        created_at=m["created_at"],
        created_by=m["created_by"],
    )


def delivery(m: Columns) -> Delivery:
    return Delivery(
        id=m["id"],
        webhook_id=m["webhook_id"],
        event=m["event"],
        body=m["body"],
        status=DeliveryStatus(m["status"]),
        attempts=m["attempts"],
        created_at=m["created_at"],
        next_at=m["next_at"],
        last_attempt_at=m["last_attempt_at"],
        status_code=m["status_code"],
        error=m["error"],
    )


def user(m: Columns) -> User:
    return User(
        id=m["id"],
        name=m["name"],
        level=Level(m["level"]),
        default_team_id=m["default_team_id"],
        max_gpus=m["max_gpus"],
        max_jobs=m["max_jobs"],
        max_queued=m["max_queued"],
        usage=float(m["usage"]),
        usage_at=m["usage_at"],
        created_at=m["created_at"],
    )


def team(m: Columns) -> Team:
    return Team(
        id=m["id"],
        name=m["name"],
        weight=float(m["weight"]),
        max_gpus=m["max_gpus"],
        max_jobs=m["max_jobs"],
        preemptible=bool(m["preemptible"]),
        can_preempt=bool(m["can_preempt"]),
        usage=float(m["usage"]),
        usage_at=m["usage_at"],
        created_at=m["created_at"],
    )


def member(m: Columns) -> Member:
    return Member(
        team_id=m["team_id"], user_id=m["user_id"], usage=float(m["usage"]), usage_at=m["usage_at"]
    )
