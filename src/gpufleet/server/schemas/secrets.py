"""Secrets for jobs: the value goes in, never out (domain/job_secrets.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, Field

from gpufleet.domain import job_secrets as rules
from gpufleet.server.schemas.base import Strict
from gpufleet.server.services.job_secrets import Listed


class SecretIn(Strict):
    value: str = Field(min_length=1, max_length=rules.MAX_SECRET_BYTES)


class SecretOut(BaseModel):
    """A secret's name, whose it is, and who wrote it when: never its value."""

    name: str
    scope: str  # user or team
    owner: str  # the user's or team's name
    owner_id: str
    created_at: datetime
    updated_at: datetime
    written_by: str  # the actor (key:k_…) who last wrote it

    @classmethod
    def of(cls, listed: Listed) -> Self:
        s = listed.secret
        return cls(
            name=s.name,
            scope=s.scope.value,
            owner=listed.owner_name,
            owner_id=s.owner_id,
            created_at=s.created_at,
            updated_at=s.updated_at,
            written_by=s.written_by,
        )


class SecretList(BaseModel):
    secrets: list[SecretOut]
