"""The queue policy as a record: its limits and rules (`Policy`), the state a decision is made
from (`Snapshot`), and the jobs it decides on (`Candidate`, `Running`). The decisions are
`domain/fair_share.py` (usage, shares, ranking), `domain/limits.py`, `domain/approvals.py`
and `domain/preemption.py`.

Pure: a service reads the rows into a `Snapshot` and asks. Usage is counted in GPU-seconds,
decayed with a half-life (Slurm's fair share); docs/scheduling.md works an example through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
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


def team_of(team_id: str | None, snap: Snapshot) -> TeamState | None:
    return snap.teams.get(team_id) if team_id is not None else None


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
