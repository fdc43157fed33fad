"""The queue policy: which queued job is offered next, the limits that hold it back, who may
preempt whom, and which jobs wait for approval.

Pure: a service reads the rows into a `Snapshot` and asks. Usage is counted in GPU-seconds,
decayed with a half-life (Slurm's fair share); docs/scheduling.md works an example through.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property

from gpufleet.domain.levels import Level as Level
from gpufleet.errors import Forbidden

LEVEL_PRIORITY: dict[Level, int] = {
    Level.ADMIN: 30,
    Level.LEAD: 20,
    Level.RESEARCHER: 10,
    Level.VIEWER: 0,
}
RAISE_PRIORITY = frozenset({Level.ADMIN, Level.LEAD})  # may ask above their level's default


def check_priority(level: Level, asked: int | None) -> int:
    """The priority a submit gets: the level's default when none is asked; above it only for
    leads and admins."""
    default = LEVEL_PRIORITY[level]
    if asked is None:
        return default
    if asked > default and level not in RAISE_PRIORITY:
        raise Forbidden(
            f"a {level} may ask a priority of at most {default}, not {asked}; leave the "
            "priority out or lower it, or ask a lead or an admin to submit the job"
        )
    return asked


@dataclass(frozen=True)
class Limits:
    """Each limit is optional (None: no limit). Jobs and GPUs count those offered or running."""

    max_jobs: int | None = None
    max_gpus: int | None = None
    team_max_jobs: int | None = None  # a team's own max_jobs, when set, replaces it
    team_max_gpus: int | None = None
    user_max_jobs: int | None = None  # a user's own max_jobs, when set, replaces it
    user_max_gpus: int | None = None
    user_max_queued: int | None = None


@dataclass(frozen=True)
class Policy:
    limits: Limits = Limits()
    fair_share: bool = False
    half_life_s: float = 604800.0  # 7 days, Slurm's default
    preemption: bool = False
    min_runtime_s: float = 600.0
    preempt_grace_s: float = 120.0
    approve_gpus_over: int | None = None
    approve_levels: frozenset[Level] = frozenset({Level.VIEWER})


# The policy's fields by the kind of value each takes: what the API changes, the store keeps
# and `gpufleet queue limits --set` reads.
LIMIT_FIELDS = tuple(f.name for f in fields(Limits))
COUNT_FIELDS = (*LIMIT_FIELDS, "approve_gpus_over")  # a count, or None: no limit
SWITCH_FIELDS = ("fair_share", "preemption")
SECONDS_FIELDS = ("half_life_s", "min_runtime_s", "preempt_grace_s")
POLICY_FIELDS = (*COUNT_FIELDS, *SWITCH_FIELDS, *SECONDS_FIELDS, "approve_levels")


@dataclass(frozen=True)
class Tally:
    """What runs in one scope: jobs offered or running, and their GPUs."""

    jobs: int = 0
    gpus: int = 0


NOTHING = Tally()


@dataclass(frozen=True)
class TeamState:
    id: str
    name: str
    weight: float = 1.0
    usage: float = 0.0  # decayed GPU-seconds
    max_gpus: int | None = None
    max_jobs: int | None = None
    preemptible: bool = False  # its jobs may be preempted (a job's own flag overrides it)
    can_preempt: bool = False  # its jobs may take back GPUs lent past another team's share


@dataclass(frozen=True)
class UserState:
    id: str
    name: str
    level: Level
    usage: float = 0.0  # decayed GPU-seconds, all teams (member_usage holds it by team)
    max_gpus: int | None = None
    max_jobs: int | None = None
    max_queued: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the policy decides from: the rows, and what runs now (offered or running)."""

    policy: Policy
    now: datetime
    teams: Mapping[str, TeamState] = field(default_factory=dict)
    users: Mapping[str, UserState] = field(default_factory=dict)
    # (team, user) -> usage inside that team; every member of a team, those at 0 included
    member_usage: Mapping[tuple[str, str], float] = field(default_factory=dict)
    fleet: Tally = NOTHING
    by_team: Mapping[str | None, Tally] = field(default_factory=dict)
    by_user: Mapping[str, Tally] = field(default_factory=dict)
    by_member: Mapping[tuple[str | None, str], Tally] = field(default_factory=dict)
    fleet_gpus: int = 0  # registered GPUs: what the shares divide
    waiting: frozenset[str | None] = frozenset()  # teams with queued jobs (demand, for shares)
    # decayed GPU-seconds of the jobs of no team: the usage of the users who are in none
    no_team_usage: float = 0.0

    @cached_property
    def _team_totals(self) -> tuple[float, float]:
        """ΣU and Σw: jobs of no team count as one more team of weight 1, once they are seen
        (used, queued or running)."""
        seen = (
            self.no_team_usage > 0
            or None in self.waiting
            or self.by_team.get(None, NOTHING).jobs > 0
        )
        return (
            sum(t.usage for t in self.teams.values()) + self.no_team_usage,
            sum(t.weight for t in self.teams.values()) + (1.0 if seen else 0.0),
        )

    @cached_property
    def _member_totals(self) -> dict[str, tuple[float, int]]:
        totals: dict[str, tuple[float, int]] = {}
        for (team_id, _), usage in self.member_usage.items():
            total, members = totals.get(team_id, (0.0, 0))
            totals[team_id] = (total + usage, members + 1)
        return totals


@dataclass(frozen=True)
class Candidate:
    """A queued job, as the policy ranks it."""

    job_id: str
    team_id: str | None
    user_id: str | None
    gpus: int
    priority: int
    created_at: datetime
    preemptible: bool | None = None  # None: its team's


@dataclass(frozen=True)
class Running:
    """An attempt offered or running, as preemption sees it."""

    job_id: str
    attempt_id: str
    worker_id: str
    team_id: str | None
    user_id: str | None
    gpus: int
    priority: int
    started_at: datetime | None
    preemptible: bool | None = None  # None: its team's
    preempted_at: datetime | None = None


# ---- usage and shares -----------------------------------------------------------------------


def decay(usage: float, seconds: float, half_life_s: float) -> float:
    """Usage after `seconds`: halved every half-life (a half-life of 0 or less never forgets)."""
    if half_life_s <= 0 or seconds <= 0:
        return usage
    return usage * math.pow(0.5, seconds / half_life_s)


def accrue(usage: float, since_s: float, running_gpus: int, half_life_s: float) -> float:
    """Usage `since_s` later, with `running_gpus` busy all along."""
    return decay(usage, since_s, half_life_s) + running_gpus * max(since_s, 0.0)


def _factor(usage: float, total_usage: float, weight: float, total_weight: float) -> float:
    """Slurm's classic fair-share factor: 1 unused, 0.5 at exactly its share, toward 0 past it."""
    if total_usage <= 0:
        return 1.0
    if weight <= 0 or total_weight <= 0:
        return 0.0
    return math.pow(2.0, -(usage / total_usage) / (weight / total_weight))


def _team(team_id: str | None, snap: Snapshot) -> TeamState | None:
    return snap.teams.get(team_id) if team_id is not None else None


def _weight(team_id: str | None, snap: Snapshot) -> float:
    team = _team(team_id, snap)
    return team.weight if team else 1.0  # a job of no team ranks as a team of weight 1


def fair_share_factor(team_id: str | None, snap: Snapshot) -> float:
    """F = 2 ** (-(U_t/ΣU) / (w_t/Σw)) over the snapshot's teams; the jobs of no team rank as
    one more team of weight 1 whose usage is `no_team_usage`."""
    team = _team(team_id, snap)
    total_usage, total_weight = snap._team_totals
    if team is None:
        return _factor(snap.no_team_usage, total_usage, 1.0, max(total_weight, 1.0))
    return _factor(team.usage, total_usage, team.weight, total_weight)


def _member_factor(team_id: str | None, user_id: str | None, snap: Snapshot) -> float:
    """Fair share between the members of one team, all of equal weight."""
    if team_id is None or user_id is None:
        return 1.0
    total, members = snap._member_totals.get(team_id, (0.0, 0))
    usage = snap.member_usage.get((team_id, user_id), 0.0)
    return _factor(usage, total, 1.0, float(max(members, 1)))


def share_gpus(team_id: str | None, snap: Snapshot) -> float:
    """The GPUs a team is guaranteed now: its weight's part of the fleet among the teams with
    demand (jobs queued or running), itself included."""
    demand = {t for t, tally in snap.by_team.items() if tally.jobs} | snap.waiting | {team_id}
    total = sum(_weight(t, snap) for t in demand)
    return snap.fleet_gpus * _weight(team_id, snap) / total if total > 0 else 0.0


# ---- ranking --------------------------------------------------------------------------------

RankKey = tuple[float | int | datetime | str, ...]


def rank_key(c: Candidate, snap: Snapshot) -> RankKey:
    """Ascending: the first is offered first. Without fair share: priority, then age. With it:
    the team furthest below its share, then the one running least for its weight, the same
    within the team between its members, then priority and age."""
    if not snap.policy.fair_share:
        return (-c.priority, c.created_at, c.job_id)
    weight = _weight(c.team_id, snap)
    team_gpus = snap.by_team.get(c.team_id, NOTHING).gpus
    user_gpus = snap.by_member.get((c.team_id, c.user_id), NOTHING).gpus if c.user_id else 0
    return (
        -fair_share_factor(c.team_id, snap),
        team_gpus / weight if weight > 0 else math.inf,
        -_member_factor(c.team_id, c.user_id, snap),
        user_gpus,
        -c.priority,
        c.created_at,
        c.job_id,
    )


# ---- limits ---------------------------------------------------------------------------------


class LimitCode(StrEnum):
    FLEET_JOBS = "fleet_jobs"
    FLEET_GPUS = "fleet_gpus"
    TEAM_JOBS = "team_jobs"
    TEAM_GPUS = "team_gpus"
    USER_JOBS = "user_jobs"
    USER_GPUS = "user_gpus"
    USER_QUEUED = "user_queued"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class LimitHit:
    """A limit a job would pass if it started (or a submit, for USER_QUEUED); `str()` says it."""

    code: LimitCode
    scope_name: str | None  # the team's or user's name; None: the fleet, or no team
    limit: int
    count: int  # what the scope has now
    needed: int = 1  # what the job would add: its GPUs, or one job

    def __str__(self) -> str:
        if self.code is LimitCode.USER_QUEUED:
            return f"you have {_count(self.count, 'queued job')}, the limit is {self.limit}"
        subject, be, uses, its = self._subject()
        if self.code in (LimitCode.FLEET_JOBS, LimitCode.TEAM_JOBS, LimitCode.USER_JOBS):
            return f"{subject} {be} at {its} limit of {_count(self.limit, 'running job')}"
        if self.needed > self.limit:
            return (
                f"the limit of {subject} is {_count(self.limit, 'GPU')}, "
                f"below the {self.needed} this job asks"
            )
        if self.count >= self.limit:
            return f"{subject} {be} at {its} limit of {_count(self.limit, 'GPU')}"
        return (
            f"{subject} {uses} {self.count} of {its} limit of {_count(self.limit, 'GPU')}; "
            f"this job asks {self.needed}"
        )

    def _subject(self) -> tuple[str, str, str, str]:
        if self.code in (LimitCode.FLEET_JOBS, LimitCode.FLEET_GPUS):
            return ("the fleet", "is", "uses", "its")
        if self.code in (LimitCode.TEAM_JOBS, LimitCode.TEAM_GPUS):
            if self.scope_name is None:
                return ("jobs of no team", "are", "use", "their")
            return (f"team {self.scope_name}", "is", "uses", "its")
        return (f"user {self.scope_name}", "is", "uses", "their")


def _own(own: int | None, default: int | None) -> int | None:
    return own if own is not None else default


def limit_hit(c: Candidate, snap: Snapshot) -> LimitHit | None:
    """The first limit starting `c` now would pass: the fleet's, its team's, its user's."""
    lim = snap.policy.limits
    team = _team(c.team_id, snap)
    scopes: list[tuple[LimitCode, LimitCode, str | None, Tally, int | None, int | None]] = [
        (LimitCode.FLEET_JOBS, LimitCode.FLEET_GPUS, None, snap.fleet, lim.max_jobs, lim.max_gpus),
        (
            LimitCode.TEAM_JOBS,
            LimitCode.TEAM_GPUS,
            team.name if team else c.team_id,
            snap.by_team.get(c.team_id, NOTHING),
            _own(team.max_jobs if team else None, lim.team_max_jobs),
            _own(team.max_gpus if team else None, lim.team_max_gpus),
        ),
    ]
    if c.user_id is not None:
        user = snap.users.get(c.user_id)
        scopes.append(
            (
                LimitCode.USER_JOBS,
                LimitCode.USER_GPUS,
                user.name if user else c.user_id,
                snap.by_user.get(c.user_id, NOTHING),
                _own(user.max_jobs if user else None, lim.user_max_jobs),
                _own(user.max_gpus if user else None, lim.user_max_gpus),
            )
        )
    for jobs_code, gpus_code, name, tally, max_jobs, max_gpus in scopes:
        if max_jobs is not None and tally.jobs + 1 > max_jobs:
            return LimitHit(jobs_code, name, max_jobs, tally.jobs)
        if max_gpus is not None and tally.gpus + c.gpus > max_gpus:
            return LimitHit(gpus_code, name, max_gpus, tally.gpus, c.gpus)
    return None


def queued_limit_hit(user: UserState, queued_now: int, policy: Policy) -> LimitHit | None:
    """Would one more queued job pass the user's limit? (`queued_now`: before this submit.)"""
    limit = _own(user.max_queued, policy.limits.user_max_queued)
    if limit is not None and queued_now >= limit:
        return LimitHit(LimitCode.USER_QUEUED, user.name, limit, queued_now)
    return None


def next_job(worker_gpus: int, queued: Sequence[Candidate], snap: Snapshot) -> Candidate | None:
    """The best-ranked queued job that fits the worker's GPUs and passes no limit."""
    eligible = (c for c in queued if c.gpus <= worker_gpus and limit_hit(c, snap) is None)
    return min(eligible, key=lambda c: rank_key(c, snap), default=None)


# ---- approvals ------------------------------------------------------------------------------


def approval_needed(policy: Policy, level: Level, gpus: int) -> str | None:
    """Why a submitted job waits for a lead's or an admin's approval, or None. The GPU rule
    spares admins: they may change the rule itself."""
    by_whom = "wait for approval by a lead of their team or an admin"
    if level in policy.approve_levels:
        return f"jobs of {level}s {by_whom}"
    over = policy.approve_gpus_over
    if over is not None and gpus > over and level is not Level.ADMIN:
        return f"jobs asking more than {_count(over, 'GPU')} {by_whom}"
    return None


# ---- preemption -----------------------------------------------------------------------------


def _preemptible(victim: Running, snap: Snapshot) -> bool:
    if victim.preemptible is not None:
        return victim.preemptible
    team = _team(victim.team_id, snap)
    return team.preemptible if team else False


def _reclaims(preemptor: Candidate, victim: Running, snap: Snapshot) -> bool:
    """Kueue's reclaim: a team that may preempt, within its share once the job starts, takes
    back GPUs from a team running past its own share (borrowed while no one waited)."""
    team = _team(preemptor.team_id, snap)
    if team is None or not team.can_preempt or victim.team_id == preemptor.team_id:
        return False
    mine = snap.by_team.get(preemptor.team_id, NOTHING).gpus + preemptor.gpus
    theirs = snap.by_team.get(victim.team_id, NOTHING).gpus
    return mine <= share_gpus(preemptor.team_id, snap) and theirs > share_gpus(victim.team_id, snap)


def may_preempt(preemptor: Candidate, victim: Running, snap: Snapshot) -> bool:
    """May `victim` be stopped for `preemptor`? Only a preemptible job, started at least
    min_runtime_s ago, not being preempted already, of lower priority or reclaimed."""
    policy = snap.policy
    if not policy.preemption or victim.job_id == preemptor.job_id:
        return False
    if victim.preempted_at is not None or victim.started_at is None:
        return False
    if (snap.now - victim.started_at).total_seconds() < policy.min_runtime_s:
        return False
    if not _preemptible(victim, snap):
        return False
    return preemptor.priority > victim.priority or _reclaims(preemptor, victim, snap)


def _without(snap: Snapshot, r: Running) -> Snapshot:
    """The snapshot once `r` has stopped."""

    def less(t: Tally) -> Tally:
        return Tally(max(t.jobs - 1, 0), max(t.gpus - r.gpus, 0))

    by_team = {**snap.by_team, r.team_id: less(snap.by_team.get(r.team_id, NOTHING))}
    by_user = dict(snap.by_user)
    by_member = dict(snap.by_member)
    if r.user_id is not None:
        by_user[r.user_id] = less(by_user.get(r.user_id, NOTHING))
        member = (r.team_id, r.user_id)
        by_member[member] = less(by_member.get(member, NOTHING))
    return replace(
        snap, fleet=less(snap.fleet), by_team=by_team, by_user=by_user, by_member=by_member
    )


def as_candidate(r: Running) -> Candidate:
    """A running job ranked as if queued, its start standing for its age."""
    started = r.started_at or datetime.max.replace(tzinfo=UTC)  # not started: the youngest
    return Candidate(r.job_id, r.team_id, r.user_id, r.gpus, r.priority, started, r.preemptible)


def choose_victim(
    preemptor: Candidate, running: Sequence[Running], snap: Snapshot
) -> Running | None:
    """The running job to stop for `preemptor`: of those it may preempt and whose end lets it
    pass every limit, the lowest-ranked. `running`: those whose worker fits the preemptor."""
    if not snap.policy.preemption:
        return None
    qualified = [
        r
        for r in running
        if may_preempt(preemptor, r, snap) and limit_hit(preemptor, _without(snap, r)) is None
    ]
    return max(qualified, key=lambda r: rank_key(as_candidate(r), snap), default=None)
