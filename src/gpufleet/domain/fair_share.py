"""Fair share and ranking (docs/scheduling.md): usage decayed with a half-life, each team's share
of the fleet, and the order queued jobs are offered in. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from gpufleet.domain.levels import Level as Level
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.policy import NOTHING, Candidate, Snapshot, team_of


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


def _weight(team_id: str | None, snap: Snapshot) -> float:
    team = team_of(team_id, snap)
    return team.weight if team else 1.0  # a job of no team ranks as a team of weight 1


def fair_share_factor(team_id: str | None, snap: Snapshot) -> float:
    """F = 2 ** (-(U_t/ΣU) / (w_t/Σw)) over the snapshot's teams; the jobs of no team rank as
    one more team of weight 1 whose usage is `no_team_usage`."""
    team = team_of(team_id, snap)
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


def next_job(worker_gpus: int, queued: Sequence[Candidate], snap: Snapshot) -> Candidate | None:
    """The best-ranked queued job that fits the worker's GPUs and passes no limit."""
    eligible = (c for c in queued if c.gpus <= worker_gpus and limit_hit(c, snap) is None)
    return min(eligible, key=lambda c: rank_key(c, snap), default=None)
