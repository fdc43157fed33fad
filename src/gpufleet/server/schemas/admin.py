"""API keys and the audit log."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from gpufleet.domain import audit_chain
from gpufleet.domain.records import ApiKey
from gpufleet.server.schemas.base import Name, Record, Strict


class CreateApiKey(Strict):
    name: str = Name
    permissions: list[str] = Field(min_length=1, max_length=8)
    user: str | None = Field(default=None, min_length=1, max_length=64)  # id or name


class ApiKeyOut(Record):
    id: str
    name: str
    permissions: list[str]
    created_at: datetime
    revoked: bool
    last_used_at: datetime | None = None  # to the minute
    user: str | None = None  # its user's name; None once the user is deleted

    @classmethod
    def of(cls, k: ApiKey, users: Mapping[str, str] | None = None) -> Self:
        user = (users or {}).get(k.user_id or "")
        return cls.over(k, permissions=sorted(k.permissions), user=user)


class CreatedApiKey(ApiKeyOut):
    key: str


class AuditOut(Record):
    id: int
    ts: datetime
    event_type: str
    actor: str
    target: str | None
    client_addr: str | None
    detail: dict[str, Any]


class AuditList(BaseModel):
    events: list[AuditOut]
    total: int
    limit: int
    offset: int
    actor_names: dict[str, str] = {}  # actor (`key:k_…`, `worker:w_…`) -> its name
    actor_users: dict[str, str] = {}  # actor (`key:k_…`) -> the name of the key's user
    hint: str | None = None  # when nothing matches: what may be why


class SeqGap(Record):
    first: int
    last: int


class AuditVerification(Record):
    """The audit chain checked; every field but `checked` and the heads is a finding."""

    ok: bool  # no finding
    checked: int  # entries that verified, in order from the first, before any break
    unsealed: int  # entries without a seal: written around the server (tampering)
    unsealed_ids: list[int]  # the first 20 of them
    gaps: list[SeqGap]  # runs of missing chain positions (the first 100)
    missing: int  # chain positions missing in all
    chain_head: int  # the last chain position in the database
    recorded_head: int | None  # the last position this server recorded outside it
    head_behind: bool  # the database no longer holds the recorded head: its end was cut
    first_broken: dict[str, Any] | None  # the first missing or changed entry

    @classmethod
    def of(cls, v: audit_chain.Verdict) -> Self:
        broken = v.first_broken
        return cls.over(v, first_broken=None if broken is None else dataclasses.asdict(broken))
