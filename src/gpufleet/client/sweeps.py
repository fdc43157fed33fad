"""What the Python client answers of a sweep (docs/jobs.md, Sweeps): a frozen `Sweep`, also a
handle (`wait`, `cancel`, `rerun`, `refresh`), and its points' latest jobs (`SweepJob`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.domain.states import JobStatus

if TYPE_CHECKING:
    from gpufleet.client.client import Client

ENDED = frozenset({"completed", "failed", "cancelled"})  # a sweep's statuses once all ended


@dataclass(frozen=True, slots=True)
class SweepJob:
    """A point's latest job: its parameters, and the numeric values its progress reported."""

    job_id: str
    status: JobStatus
    params: Mapping[str, Any]
    metrics: Mapping[str, float]
    step: int | None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> SweepJob:
        return cls(
            job_id=str(body["job_id"]),
            status=JobStatus(body["status"]),
            params=body.get("params") or {},
            metrics=body.get("metrics") or {},
            step=body.get("step"),
        )


@dataclass(frozen=True, slots=True)
class Sweep:
    """A sweep as the orchestrator last answered it; `jobs` only from `client.sweep_of` (and
    the handle's `refresh` and `wait`)."""

    id: str
    status: str  # running, queued; once all ended: completed, failed or cancelled
    params: Mapping[str, list[Any]]
    size: int
    counts: Mapping[str, int]
    max_parallel: int | None
    created_at: datetime | None
    jobs: tuple[SweepJob, ...]
    idempotent_hit: bool  # a submit's answer: its key named this sweep, made before
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    client: Client = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any], client: Client) -> Sweep:
        created = body.get("created_at")
        return cls(
            id=str(body["id"]),
            status=str(body["status"]),
            params=body.get("params") or {},
            size=int(body.get("size") or 0),
            counts=body.get("counts") or {},
            max_parallel=body.get("max_parallel"),
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else None,
            jobs=tuple(SweepJob.of(j) for j in body.get("jobs") or ()),
            idempotent_hit=bool(body.get("idempotent_hit", False)),
            raw=body,
            client=client,
        )

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def refresh(self) -> Sweep:
        return self.client.sweep_of(self.id)

    def wait(self, timeout: float | None = None) -> Sweep:
        """The sweep once every job of it ended; `TimeoutError` after `timeout` seconds."""
        return self.client.wait_sweep(self.id, timeout=timeout)

    def cancel(self) -> Sweep:
        return self.client.cancel_sweep(self.id)

    def rerun(self) -> Sweep:
        """Its failed and cancelled jobs run again, in the sweep."""
        return self.client.rerun_sweep(self.id)
