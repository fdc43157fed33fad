"""What the audit log's filters accept: the event types it records, a period, an actor."""

from __future__ import annotations

from datetime import datetime

from gpufleet.errors import InvalidInput

# Every event type gpufleet records today. A type recorded since (by a newer module) is
# accepted all the same when the log holds it: see `services/audit.py`.
EVENT_TYPES = frozenset(
    {
        "apikey.created",
        "apikey.revoked",
        "artifact.created",
        "artifact.deleted",
        "artifacts.pinned",
        "attempt.ended",
        "audit.chain_upgraded",
        "auth.failed",
        "auth.rate_limited",
        "config.created",
        "config.deleted",
        "config.updated",
        "job.cancelled",
        "job.approved",
        "job.dispatched",
        "job.gang_dispatched",
        "job.gang_held",
        "job.gang_released",
        "job.gang_started",
        "job.node_ended",
        "job.node_stopped",
        "job.preempted",
        "job.rejected",
        "job.report_refused",
        "job.status_changed",
        "job.submitted",
        "pool.created",
        "pool.deleted",
        "pool.updated",
        "queue.cleaned",
        "queue.policy_changed",
        "secret.created",
        "secret.deleted",
        "secret.updated",
        "sweep.cancelled",
        "sweep.rerun",
        "sweep.submitted",
        "gpu.fault",
        "team.created",
        "team.deleted",
        "team.member_added",
        "team.member_removed",
        "team.updated",
        "user.created",
        "user.deleted",
        "user.signed_in",
        "user.updated",
        "worker.created",
        "worker.deleted",
        "worker.disconnected",
        "worker.drained",
        "worker.healthy",
        "worker.labels_set",
        "worker.lost",
        "worker.register_failed",
        "worker.registered",
        "worker.status_changed",
        "worker.token_created",
        "worker.token_rotated",
        "worker.undrained",
        "worker.unhealthy",
        "webhook.created",
        "webhook.deleted",
        "webhook.tested",
        "workdir.held",
        "workdir.uploaded",
        "webhook.updated",
    }
)
FAMILIES = sorted({t.split(".", 1)[0] + "." for t in EVENT_TYPES})


def is_known_type(value: str, known: frozenset[str] = EVENT_TYPES) -> bool:
    """A type filter names a known type, or a prefix ending in '.' of one."""
    if value.endswith("."):
        return any(t.startswith(value) for t in known)
    return value in known


def unknown_type(value: str) -> InvalidInput:
    return InvalidInput(
        f"unknown event type {value!r}; use a type such as worker.drained, or a prefix ending "
        f"in '.': {', '.join(FAMILIES)}"
    )


def check_period(since: datetime | None, until: datetime | None) -> None:
    if since is not None and until is not None and since > until:
        raise InvalidInput(
            f"since ({since.isoformat()}) is after until ({until.isoformat()}); choose a since "
            "before until, or leave one of them empty"
        )


KEY_ACTOR = "key:"  # an API key's actor: `key:<key id>`
WORKER_ACTOR = "worker:"  # a worker's: `worker:<worker id>`
SYSTEM_ACTOR = "system"  # the orchestrator itself


def worker_actor(worker_id: str) -> str:
    return f"{WORKER_ACTOR}{worker_id}"


def key_actor(key_id: str) -> str:
    return f"{KEY_ACTOR}{key_id}"
