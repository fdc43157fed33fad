"""A job's artifacts and checkpoints as its users read them (docs/artifacts.md, User API)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Self

from pydantic import BaseModel, Field

from gpufleet.server.schemas.base import Record, Strict

if TYPE_CHECKING:
    from gpufleet.server.services.artifacts import JobArtifacts


class ArtifactOut(Record):
    id: str
    job_id: str
    attempt_id: str
    attempt_number: int
    path: str
    kind: str
    checkpoint: str | None
    size: int
    sha256: str
    created_at: datetime


class CheckpointNodesOut(Record):
    """A multi-node job's checkpoint: which of its nodes committed their part."""

    nodes: int  # the gang's node count
    done: list[int]
    missing: list[int]
    complete: bool


class CheckpointOut(Record):
    id: str
    name: str
    path: str
    step: int | None
    attempt_id: str
    attempt_number: int
    files: int
    size: int
    created_at: datetime
    nodes: CheckpointNodesOut | None = None  # a multi-node job's (resumed from when complete)


class ArtifactList(BaseModel):
    job_id: str
    pinned: bool
    total_bytes: int
    artifacts: list[ArtifactOut]
    checkpoints: list[CheckpointOut]

    @classmethod
    def of(cls, listed: JobArtifacts) -> Self:
        return cls(
            job_id=listed.job.id,
            pinned=listed.job.artifacts_pinned,
            total_bytes=listed.total_bytes,
            artifacts=[ArtifactOut.of(a) for a in listed.artifacts],
            checkpoints=[
                CheckpointOut.over(c, nodes=listed.nodes.get(c.id)) for c in listed.checkpoints
            ],
        )


class PinIn(Strict):
    pinned: bool = Field(strict=True)  # true or false, not "yes"


class PinOut(BaseModel):
    job_id: str
    pinned: bool


class Deleted(BaseModel):
    job_id: str
    deleted: int  # artifacts removed
