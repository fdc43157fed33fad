"""What a list of jobs or of audit events is narrowed to (the Queue's and the Audit page's
filters)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class JobFilter:
    statuses: Sequence[str] = ()
    worker_id: str | None = None
    target: str | None = None
    config_name: str | None = None
    worker: str | None = None  # a worker's id, or its name
    labels: Mapping[str, str] | None = None  # the job asks for each of these, exactly
    id_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class AuditFilter:
    event_type: str | None = None  # exact, or a prefix ending in '.' ("worker.")
    actor: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    user: str | None = None  # a user's name or id: the events by their keys
    actors: tuple[str, ...] | None = None  # any of these (a user's keys); () matches none
