"""What an API key may do."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.domain.levels import Level
from gpufleet.errors import InvalidInput

ADMIN_WORKERS = "admin.workers"
ADMIN_AUDIT = "admin.audit"
QUEUE_SUBMIT = "queue.submit"
QUEUE_READ = "queue.read"
QUEUE_APPROVE = "queue.approve"
METRICS_READ = "metrics.read"
ALL = "*"

PERMISSIONS = frozenset(
    {ADMIN_WORKERS, ADMIN_AUDIT, QUEUE_SUBMIT, QUEUE_READ, QUEUE_APPROVE, METRICS_READ, ALL}
)

# What each permission allows, in a sentence (the API keys page offers them in this order).
PERMISSION_HELP: dict[str, str] = {
    QUEUE_READ: "see the queue, jobs, their logs and stored configs",
    QUEUE_SUBMIT: "submit and cancel jobs, and store configs",
    QUEUE_APPROVE: "approve or reject jobs waiting for approval",
    ADMIN_WORKERS: "create, drain, rotate and delete workers",
    ADMIN_AUDIT: "read and verify the audit log",
    METRICS_READ: "scrape the Prometheus metrics",
    ALL: "everything, API keys and webhooks included: a full administrator",
}

# The most a key of a user at each level may do: a key's own permissions are cut to these.
LEVEL_PERMISSIONS: dict[Level, frozenset[str]] = {
    Level.ADMIN: frozenset({ALL}),
    Level.LEAD: frozenset({QUEUE_READ, QUEUE_SUBMIT, QUEUE_APPROVE, METRICS_READ}),
    Level.RESEARCHER: frozenset({QUEUE_READ, QUEUE_SUBMIT}),
    Level.VIEWER: frozenset({QUEUE_READ, QUEUE_SUBMIT}),
}


def effective_permissions(key_perms: Iterable[str], level: Level) -> frozenset[str]:
    """What a key may do: its own permissions that its user's level also allows (the
    wildcard on either side stands for the other side's set)."""
    own = frozenset(key_perms)
    most = LEVEL_PERMISSIONS[level]
    if ALL in own:
        return most
    if ALL in most:
        return own
    return own & most


def allows(granted: Iterable[str], needed: str) -> bool:
    granted = set(granted)
    return ALL in granted or needed in granted


def check_permissions(requested: Iterable[str]) -> list[str]:
    perms = sorted(set(requested))
    unknown = [p for p in perms if p not in PERMISSIONS]
    if unknown:
        valid = ", ".join(sorted(PERMISSIONS))
        raise InvalidInput(f"unknown permission(s) {', '.join(unknown)}; choose from {valid}")
    if not perms:
        raise InvalidInput("an API key needs at least one permission")
    return perms
