"""STAND-IN for h18-domain's domain/policy.py (contract names only); replaced on merge."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from gpufleet.domain.levels import LEVEL_PRIORITY, Level
from gpufleet.errors import Forbidden

__all__ = ["LEVEL_PRIORITY", "Level"]


def check_priority(level: Level, asked: int | None) -> int:
    default = LEVEL_PRIORITY[level]
    if asked is None:
        return default
    if asked > default and level not in (Level.ADMIN, Level.LEAD):
        raise Forbidden(f"priority {asked} is above your level's {default}; ask a lead")
    return asked


@dataclass(frozen=True)
class Limits:
    max_jobs: int | None = None
    max_gpus: int | None = None
    team_max_jobs: int | None = None
    team_max_gpus: int | None = None
    user_max_jobs: int | None = None
    user_max_gpus: int | None = None
    user_max_queued: int | None = None


@dataclass(frozen=True)
class Policy:
    limits: Limits = field(default_factory=Limits)
    fair_share: bool = False
    half_life_s: float = 604800.0
    preemption: bool = False
    min_runtime_s: float = 600.0
    preempt_grace_s: float = 120.0
    approve_gpus_over: int | None = None
    approve_levels: frozenset[Level] = frozenset({Level.VIEWER})


@dataclass(frozen=True)
class Tally:
    jobs: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class TeamState:
    id: str
    name: str
    weight: float
    usage: float
    max_gpus: int | None
    max_jobs: int | None
    preemptible: bool
    can_preempt: bool


@dataclass(frozen=True)
class UserState:
    id: str
    name: str
    level: Level
    usage: float
    max_gpus: int | None
    max_jobs: int | None
    max_queued: int | None


@dataclass(frozen=True)
class Snapshot:
    policy: Policy
    now: datetime
    teams: Mapping[str, TeamState]
    users: Mapping[str, UserState]
    member_usage: Mapping[tuple[str, str], float]
    fleet: Tally
    by_team: Mapping[str | None, Tally]
    by_user: Mapping[str, Tally]
    by_member: Mapping[tuple[str | None, str], Tally]
    fleet_gpus: int


@dataclass(frozen=True)
class Candidate:
    job_id: str
    team_id: str | None
    user_id: str | None
    gpus: int
    priority: int
    created_at: datetime
    preemptible: bool


@dataclass(frozen=True)
class Running:
    job_id: str
    attempt_id: str
    worker_id: str
    team_id: str | None
    user_id: str | None
    gpus: int
    priority: int
    started_at: datetime | None
    preemptible: bool
    preempted_at: datetime | None


def decay(usage: float, seconds: float, half_life_s: float) -> float:
    return float(usage * 0.5 ** (max(0.0, seconds) / half_life_s))


def accrue(usage: float, since_s: float, running_gpus: int, half_life_s: float) -> float:
    return decay(usage, since_s, half_life_s) + running_gpus * max(0.0, since_s)


def _weight(team_id: str | None, snap: Snapshot) -> float:
    t = snap.teams.get(team_id) if team_id else None
    return t.weight if t else 1.0


def fair_share_factor(team_id: str | None, snap: Snapshot) -> float:
    total_u = sum(t.usage for t in snap.teams.values())
    if total_u <= 0:
        return 1.0
    total_w = sum(t.weight for t in snap.teams.values()) or 1.0
    t = snap.teams.get(team_id) if team_id else None
    u = t.usage if t else 0.0
    share = (u / total_u) / (_weight(team_id, snap) / total_w)
    return float(0.5**share)


def share_gpus(team_id: str | None, snap: Snapshot) -> float:
    total_w = sum(t.weight for t in snap.teams.values()) or 1.0
    return _weight(team_id, snap) / total_w * snap.fleet_gpus


def _user_factor(team_id: str | None, user_id: str | None, snap: Snapshot) -> float:
    inside = {k: v for k, v in snap.member_usage.items() if k[0] == team_id}
    total = sum(inside.values())
    if total <= 0 or user_id is None:
        return 1.0
    n = len(inside) or 1
    return float(2 ** (-(inside.get((team_id or "", user_id), 0.0) / total) * n))


def rank_key(c: Candidate, snap: Snapshot) -> tuple[object, ...]:
    if not snap.policy.fair_share:
        return (-c.priority, c.created_at, c.job_id)
    team_run = snap.by_team.get(c.team_id, Tally()).gpus
    user_run = snap.by_member.get((c.team_id, c.user_id or ""), Tally()).gpus
    return (
        -fair_share_factor(c.team_id, snap),
        team_run / _weight(c.team_id, snap),
        -_user_factor(c.team_id, c.user_id, snap),
        user_run,
        -c.priority,
        c.created_at,
        c.job_id,
    )


class LimitCode(StrEnum):
    FLEET_JOBS = "fleet_jobs"
    FLEET_GPUS = "fleet_gpus"
    TEAM_JOBS = "team_jobs"
    TEAM_GPUS = "team_gpus"
    USER_JOBS = "user_jobs"
    USER_GPUS = "user_gpus"
    USER_QUEUED = "user_queued"


@dataclass(frozen=True)
class LimitHit:
    code: LimitCode
    scope_name: str | None
    limit: int
    count: int

    def __str__(self) -> str:
        what = "GPUs" if self.code.value.endswith("gpus") else "jobs"
        if self.code is LimitCode.USER_QUEUED:
            return f"you have {self.count} queued jobs, the limit is {self.limit}"
        scope = self.code.value.split("_")[0]
        who = "the fleet" if scope == "fleet" else f"{scope} {self.scope_name}"
        return f"{who} is at its limit of {self.limit} {what}"


def _min(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def limit_hit(c: Candidate, snap: Snapshot) -> LimitHit | None:
    lim = snap.policy.limits
    checks: list[tuple[LimitCode, str | None, int | None, int]] = []
    f = snap.fleet
    checks += [(LimitCode.FLEET_JOBS, None, lim.max_jobs, f.jobs + 1)]
    checks += [(LimitCode.FLEET_GPUS, None, lim.max_gpus, f.gpus + c.gpus)]
    team = snap.teams.get(c.team_id) if c.team_id else None
    if c.team_id is not None:
        t = snap.by_team.get(c.team_id, Tally())
        tname: str | None = team.name if team else c.team_id
        checks += [
            (
                LimitCode.TEAM_JOBS,
                tname,
                _min(lim.team_max_jobs, team.max_jobs if team else None),
                t.jobs + 1,
            )
        ]
        checks += [
            (
                LimitCode.TEAM_GPUS,
                tname,
                _min(lim.team_max_gpus, team.max_gpus if team else None),
                t.gpus + c.gpus,
            )
        ]
    if c.user_id is not None:
        user = snap.users.get(c.user_id)
        u = snap.by_user.get(c.user_id, Tally())
        uname: str | None = user.name if user else c.user_id
        checks += [
            (
                LimitCode.USER_JOBS,
                uname,
                _min(lim.user_max_jobs, user.max_jobs if user else None),
                u.jobs + 1,
            )
        ]
        checks += [
            (
                LimitCode.USER_GPUS,
                uname,
                _min(lim.user_max_gpus, user.max_gpus if user else None),
                u.gpus + c.gpus,
            )
        ]
    for code, scope, limit, after in checks:
        if limit is not None and after > limit:
            return LimitHit(code, scope, limit, after - (c.gpus if "gpus" in code.value else 1))
    return None


def queued_limit_hit(user: UserState, queued_now: int, policy: Policy) -> LimitHit | None:
    limit = _min(policy.limits.user_max_queued, user.max_queued)
    if limit is not None and queued_now + 1 > limit:
        return LimitHit(LimitCode.USER_QUEUED, user.name, limit, queued_now)
    return None


def approval_needed(policy: Policy, level: Level, gpus: int) -> str | None:
    if level in policy.approve_levels:
        return f"jobs of {level.value}s need a lead's approval"
    if policy.approve_gpus_over is not None and gpus > policy.approve_gpus_over:
        return f"jobs asking more than {policy.approve_gpus_over} GPUs need approval"
    return None


def _preemptible(r: Running, snap: Snapshot) -> bool:
    return r.preemptible


def may_preempt(preemptor: Candidate, victim: Running, snap: Snapshot) -> bool:
    p = snap.policy
    if not victim.preemptible or victim.preempted_at is not None or victim.started_at is None:
        return False
    if (snap.now - victim.started_at).total_seconds() < p.min_runtime_s:
        return False
    if victim.priority < preemptor.priority:
        return True
    team = snap.teams.get(preemptor.team_id) if preemptor.team_id else None
    if team is None or not team.can_preempt:
        return False
    mine = snap.by_team.get(preemptor.team_id, Tally()).gpus
    theirs = snap.by_team.get(victim.team_id, Tally()).gpus
    return mine < share_gpus(preemptor.team_id, snap) and theirs > share_gpus(victim.team_id, snap)


def choose_victim(
    preemptor: Candidate, running: Sequence[Running], snap: Snapshot
) -> Running | None:
    able = [r for r in running if r.gpus >= preemptor.gpus and may_preempt(preemptor, r, snap)]
    if not able:
        return None

    def key(r: Running) -> tuple[object, ...]:
        c = Candidate(
            r.job_id, r.team_id, r.user_id, r.gpus, r.priority, r.started_at or snap.now, True
        )
        return rank_key(c, snap)

    return max(able, key=key)


def next_job(worker_gpus: int, queued: Sequence[Candidate], snap: Snapshot) -> Candidate | None:
    fitting = [c for c in queued if c.gpus <= worker_gpus and limit_hit(c, snap) is None]
    return min(fitting, key=lambda c: rank_key(c, snap)) if fitting else None


_ = math
