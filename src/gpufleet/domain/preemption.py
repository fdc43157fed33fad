"""Preemption (docs/scheduling.md): who may stop whose running job, and which one to stop. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from gpufleet.domain.fair_share import rank_key, share_gpus
from gpufleet.domain.levels import Level as Level
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.policy import NOTHING, Candidate, Running, Snapshot, Tally, team_of


def _preemptible(victim: Running, snap: Snapshot) -> bool:
    if victim.preemptible is not None:
        return victim.preemptible
    team = team_of(victim.team_id, snap)
    return team.preemptible if team else False


def _reclaims(preemptor: Candidate, victim: Running, snap: Snapshot) -> bool:
    """Kueue's reclaim: a team that may preempt, within its share once the job starts, takes
    back GPUs from a team running past its own share (borrowed while no one waited)."""
    team = team_of(preemptor.team_id, snap)
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
