"""What an API key may do."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.errors import InvalidInput

ADMIN_WORKERS = "admin.workers"
ADMIN_AUDIT = "admin.audit"
QUEUE_SUBMIT = "queue.submit"
QUEUE_READ = "queue.read"
QUEUE_APPROVE = "queue.approve"  # h18-domain adds it to PERMISSIONS
METRICS_READ = "metrics.read"
ALL = "*"

PERMISSIONS = frozenset({ADMIN_WORKERS, ADMIN_AUDIT, QUEUE_SUBMIT, QUEUE_READ, METRICS_READ, ALL})

# What each permission allows, in a sentence (the API keys page offers them in this order).
PERMISSION_HELP: dict[str, str] = {
    QUEUE_READ: "see the queue, jobs, their logs and stored configs",
    QUEUE_SUBMIT: "submit and cancel jobs, and store configs",
    ADMIN_WORKERS: "create, drain, rotate and delete workers",
    ADMIN_AUDIT: "read and verify the audit log",
    METRICS_READ: "scrape the Prometheus metrics",
    ALL: "everything, API keys and webhooks included: a full administrator",
}


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
