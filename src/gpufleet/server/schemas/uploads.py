"""The artifact and checkpoint bodies of the worker API (docs/artifacts.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from gpufleet.server.schemas.base import Lenient, Record

AttemptId = Field(min_length=1, max_length=64)
PathField = Field(min_length=1, max_length=4096)  # checked further by artifacts.keys
Sha256Field = Field(min_length=64, max_length=64)
BIGINT = 2**63 - 1  # the columns' range


class UploadIn(Lenient):
    attempt_id: str = AttemptId
    path: str = PathField
    size: int = Field(ge=0)  # over the job's limit: 413, saying it
    sha256: str = Sha256Field
    kind: Literal["artifact", "checkpoint"] = "artifact"
    checkpoint: str | None = Field(None, min_length=1, max_length=255)


class UploadOut(BaseModel):
    upload_id: str
    method: Literal["PUT"] = "PUT"
    url: str  # presigned (via store), or a path on the orchestrator
    headers: dict[str, str]
    via: Literal["orchestrator", "store"]


class ArtifactOut(Record):
    id: str
    job_id: str
    attempt_id: str
    attempt_number: int | None
    path: str
    kind: str
    checkpoint: str | None
    size: int
    sha256: str
    created_at: datetime


class UploadExistsOut(BaseModel):
    exists: Literal[True] = True
    artifact: ArtifactOut


class CheckpointFileIn(Lenient):
    path: str = PathField
    size: int = Field(ge=0, le=BIGINT)
    sha256: str = Sha256Field


class CheckpointIn(Lenient):
    attempt_id: str = AttemptId
    name: str = Field(min_length=1, max_length=255)
    path: str = PathField
    step: int | None = Field(None, ge=0, le=BIGINT)
    files: list[CheckpointFileIn] = Field(min_length=1, max_length=100_000)
    node_rank: int | None = Field(None, ge=0, le=100_000)  # a multi-node job's node: its part


class CheckpointOut(Record):
    id: str
    job_id: str
    attempt_id: str
    attempt_number: int | None
    name: str
    path: str
    step: int | None
    files: int
    size: int
    created_at: datetime


class FetchFileOut(BaseModel):
    path: str
    size: int
    sha256: str
    url: str  # presigned for object storage, else the orchestrator's artifact route
    headers: dict[str, str]


class CheckpointFetchOut(BaseModel):
    id: str
    name: str
    path: str
    step: int | None
    files: list[FetchFileOut]
