"""The state a policy decision reads: teams, users, their usage and what runs
(`domain.policy.Snapshot`), read in one place for dispatch, approvals and the policy loop."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from gpufleet.domain.policy import Candidate, Policy, Snapshot, Tally, TeamState, UserState
from gpufleet.domain.records import Job, User
from gpufleet.store import Queries


def has_limits(policy: Policy, own_limits: bool = False) -> bool:
    """Whether any limit on what runs is set (the queued-jobs limit is submit's);
    `own_limits`: some team or user has one of its own."""
    lim = policy.limits
    return own_limits or any(
        v is not None
        for v in (
            lim.max_jobs,
            lim.max_gpus,
            lim.team_max_jobs,
            lim.team_max_gpus,
            lim.user_max_jobs,
            lim.user_max_gpus,
        )
    )


def limits_in(snap: Snapshot) -> bool:
    """Whether the snapshot's policy, teams or users limit what runs."""
    own = any(t.max_gpus is not None or t.max_jobs is not None for t in snap.teams.values())
    own = own or any(u.max_gpus is not None or u.max_jobs is not None for u in snap.users.values())
    return has_limits(snap.policy, own)


def is_plain(policy: Policy, own_limits: bool = False) -> bool:
    """No fair share and no limit on what runs: dispatch goes today's way at today's cost."""
    return not policy.fair_share and not has_limits(policy, own_limits)


def user_state(u: User) -> UserState:
    """A user as the policy sees it (their usage over all teams)."""
    return UserState(
        id=u.id,
        name=u.name,
        level=u.level,
        usage=u.usage,
        max_gpus=u.max_gpus,
        max_jobs=u.max_jobs,
        max_queued=u.max_queued,
    )


async def snapshot(
    q: Queries, now: datetime, policy: Policy | None = None, *, shares: bool = True
) -> Snapshot:
    """Teams, users, their usage, and what runs by fleet, team, user and member;
    `shares=False` leaves out the registered GPUs (a sum over the fleet) that only shares
    (`share_gpus`: preemption, the team views) are of: ranking and limits need none."""
    policy = policy or await q.get_policy()
    teams = {
        t.id: TeamState(
            id=t.id,
            name=t.name,
            weight=t.weight,
            usage=t.usage,
            max_gpus=t.max_gpus,
            max_jobs=t.max_jobs,
            preemptible=t.preemptible,
            can_preempt=t.can_preempt,
        )
        for t in await q.list_teams()
    }
    users = {u.id: user_state(u) for u in await q.list_users()}
    members = {(m.team_id, m.user_id): m.usage for m in await q.all_members()}
    in_a_team = {user_id for _team, user_id in members}
    fleet = [0, 0]
    by_team: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    by_user: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_member: dict[tuple[str | None, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in await q.running_tallies():
        cells = [fleet, by_team[r.team_id]]
        if r.user_id is not None:
            cells += [by_user[r.user_id], by_member[(r.team_id, r.user_id)]]
        for cell in cells:
            cell[0] += r.jobs
            cell[1] += r.gpus
    return Snapshot(
        policy=policy,
        now=now,
        teams=teams,
        users=users,
        member_usage=members,
        fleet=Tally(*fleet),
        by_team={k: Tally(*v) for k, v in by_team.items()},
        by_user={k: Tally(*v) for k, v in by_user.items()},
        by_member={k: Tally(*v) for k, v in by_member.items()},
        fleet_gpus=await q.registered_gpus() if shares else 0,
        # the jobs of no team are those of the users in none (resolve_submitter)
        no_team_usage=sum(u.usage for u in users.values() if u.id not in in_a_team),
    )


def candidate(job: Job, snap: Snapshot) -> Candidate:
    team = snap.teams.get(job.team_id) if job.team_id else None
    preemptible = (
        job.preemptible if job.preemptible is not None else bool(team and team.preemptible)
    )
    return Candidate(
        job_id=job.id,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=job.total_gpus,
        priority=job.priority,
        created_at=job.created_at,
        preemptible=preemptible,
    )
