"""Users and teams as the API shows them (docs/scheduling.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, Field

from gpufleet.domain.levels import Level
from gpufleet.domain.people import MAX_LIMIT, MAX_WEIGHT
from gpufleet.domain.records import UsageSample
from gpufleet.server.schemas.base import Record, Strict
from gpufleet.server.services.people import TeamView, UserView

# The domain says the rule (domain/people.py); this only bounds what is read.
PersonName = Field(min_length=1, max_length=256)
NewName = Field("", min_length=1, max_length=256)  # a rename; its default stands for "not sent"
Ref = Field(None, min_length=1, max_length=256)  # a user or team: its id or name
# Strict: `true` is not 1, "8" is not 8.
Limit = Field(None, ge=0, le=MAX_LIMIT, strict=True)  # null: no limit of its own
Weight = Field(1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False, strict=True)


class CreateUser(Strict):
    name: str = PersonName
    level: Level
    team: str | None = Ref  # a team to put them in, which becomes their default
    max_gpus: int | None = Limit
    max_jobs: int | None = Limit
    max_queued: int | None = Limit
    service: bool = False  # automation's owner: its keys work under --oidc-only


class UpdateUser(Strict):
    """Only the fields sent change; a limit sent as null is no limit."""

    name: str = NewName
    level: Level = Level.RESEARCHER
    default_team: str | None = Ref
    max_gpus: int | None = Limit
    max_jobs: int | None = Limit
    max_queued: int | None = Limit


class CreateTeam(Strict):
    name: str = PersonName
    weight: float = Weight
    max_gpus: int | None = Limit
    max_jobs: int | None = Limit
    preemptible: bool = False  # its jobs may be preempted
    can_preempt: bool = False  # its jobs may preempt


class UpdateTeam(Strict):
    """Only the fields sent change."""

    name: str = NewName
    weight: float = Weight
    max_gpus: int | None = Limit
    max_jobs: int | None = Limit
    preemptible: bool = False
    can_preempt: bool = False


class UserOut(Record):
    id: str
    name: str
    level: Level
    default_team: str | None  # its name
    teams: list[str]  # their names
    max_gpus: int | None
    max_jobs: int | None
    max_queued: int | None
    created_at: datetime
    keys: int  # active API keys
    service: bool  # automation's owner (its keys work under --oidc-only)

    @classmethod
    def of_view(cls, v: UserView) -> Self:
        return cls.over(v.user, default_team=v.default_team, teams=v.teams, keys=v.keys)


class TeamOut(Record):
    id: str
    name: str
    weight: float
    max_gpus: int | None
    max_jobs: int | None
    preemptible: bool
    can_preempt: bool
    members: list[str]  # user names
    usage: float  # decayed GPU-seconds
    running_gpus: int  # offered or running now
    running_jobs: int
    share_gpus: float | None  # its guaranteed share of the fleet's GPUs, by weight
    fair_share_factor: float | None  # Slurm's: 1 unused … 0 far over its share
    cost: float  # its jobs' share of the pools' cost to date (docs/capacity.md)

    @classmethod
    def of_view(cls, v: TeamView) -> Self:
        return cls.over(
            v.team,
            members=v.members,
            running_gpus=v.running_gpus,
            running_jobs=v.running_jobs,
            share_gpus=v.share_gpus,
            fair_share_factor=v.fair_share_factor,
            cost=v.cost,
        )


class UserList(BaseModel):
    users: list[UserOut]


class TeamList(BaseModel):
    teams: list[TeamOut]


class SampleOut(Record):
    at: datetime
    running_gpus: int
    usage: float

    @classmethod
    def of_sample(cls, s: UsageSample) -> Self:
        return cls.of(s)


class TeamUsage(BaseModel):
    samples: list[SampleOut]
