"""The policy's limits (docs/scheduling.md): running jobs and GPUs per fleet, team and user,
and queued jobs per user; which one holds a job back, said as a person reads it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.levels import Level as Level
from gpufleet.domain.policy import NOTHING, Candidate, Policy, Snapshot, Tally, UserState, team_of


class LimitCode(StrEnum):
    FLEET_JOBS = "fleet_jobs"
    FLEET_GPUS = "fleet_gpus"
    TEAM_JOBS = "team_jobs"
    TEAM_GPUS = "team_gpus"
    USER_JOBS = "user_jobs"
    USER_GPUS = "user_gpus"
    USER_QUEUED = "user_queued"


def count_of(n: int, noun: str) -> str:
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
            return f"you have {count_of(self.count, 'queued job')}, the limit is {self.limit}"
        subject, be, uses, its = self._subject()
        if self.code in (LimitCode.FLEET_JOBS, LimitCode.TEAM_JOBS, LimitCode.USER_JOBS):
            return f"{subject} {be} at {its} limit of {count_of(self.limit, 'running job')}"
        if self.needed > self.limit:
            return (
                f"the limit of {subject} is {count_of(self.limit, 'GPU')}, "
                f"below the {self.needed} this job asks"
            )
        if self.count >= self.limit:
            return f"{subject} {be} at {its} limit of {count_of(self.limit, 'GPU')}"
        return (
            f"{subject} {uses} {self.count} of {its} limit of {count_of(self.limit, 'GPU')}; "
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
    team = team_of(c.team_id, snap)
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
