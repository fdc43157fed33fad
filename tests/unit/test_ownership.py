"""Who may act on a job: `ownership.decide` as a table (every level, relation to the job and
action), checked against the rules of #31 written out again here, and `job_actions` as a
property (what the answer's `actions` lists is what `decide`, the permissions and the
status allow)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.levels import ADMIN_USER_ID, Level
from gpufleet.domain.ownership import (
    NEEDS,
    SAID,
    Actor,
    Allowed,
    JobAction,
    Refused,
    decide,
    job_actions,
    may_read_code,
    owner_of,
)
from gpufleet.domain.permissions import (
    ALL,
    LEVEL_PERMISSIONS,
    PERMISSIONS,
    QUEUE_APPROVE,
    QUEUE_SUBMIT,
)
from gpufleet.domain.states import TERMINAL_JOB, JobStatus

ME = "u_me"
OTHER = "u_other"
MINE = "t_mine"  # the caller's team
THEIRS = "t_theirs"


@dataclass(frozen=True)
class Job:
    user_id: str | None
    team_id: str | None
    status: JobStatus = JobStatus.QUEUED


# How the job relates to the caller (a member of MINE): (its owner, its team).
RELATIONS = {
    "own job in my team": (ME, MINE),
    "own job without a team": (ME, None),
    "same team, another's": (OTHER, MINE),
    "other team's": (OTHER, THEIRS),
    "another's, no team": (OTHER, None),
    "legacy (no owner), no team": (None, None),
    "legacy (no owner), my team": (None, MINE),
    "legacy (no owner), other team": (None, THEIRS),
}


def expected(level: Level, relation: str, action: JobAction) -> bool:
    """#31's rules, stated again: admins everything; owner, and leads of the job's team, act
    on it; a lead never approves or rejects their own job; viewers only their own jobs."""
    owner, team = RELATIONS[relation]
    if level is Level.ADMIN:
        return True
    own = owner == ME  # a legacy job is the built-in admin's, never this caller's
    lead_of_its_team = level is Level.LEAD and team == MINE
    if action in (JobAction.APPROVE, JobAction.REJECT):
        return lead_of_its_team and not own
    if level is Level.VIEWER:
        return own
    return own or lead_of_its_team


CASES = [
    (level, relation, action) for level in Level for relation in RELATIONS for action in JobAction
]


@pytest.mark.parametrize(("level", "relation", "action"), CASES)
def test_who_may_act_on_a_job_is_the_table_of_its_rules(
    level: Level, relation: str, action: JobAction
) -> None:
    owner, team = RELATIONS[relation]
    actor = Actor(ME, level, frozenset({MINE}))

    decision = decide(actor, Job(owner, team), action)

    if expected(level, relation, action):
        assert decision == Allowed()
    else:
        assert isinstance(decision, Refused)
        assert "ask" in decision.reason  # says what to do next
        assert "admin" in decision.reason and SAID[action][1] in decision.reason


def test_a_job_without_an_owner_is_the_built_in_admins() -> None:
    assert owner_of(Job(None, None)) == ADMIN_USER_ID
    admin_user = Actor(ADMIN_USER_ID, Level.ADMIN, frozenset())
    assert decide(admin_user, Job(None, None), JobAction.CANCEL) == Allowed()


def test_a_lead_is_a_lead_only_of_the_teams_they_are_in() -> None:
    lead = Actor(ME, Level.LEAD, frozenset({MINE}))
    assert decide(lead, Job(OTHER, THEIRS), JobAction.APPROVE) != Allowed()
    assert decide(lead, Job(OTHER, MINE), JobAction.APPROVE) == Allowed()
    teamless = Actor(ME, Level.LEAD, frozenset())
    assert decide(teamless, Job(OTHER, None), JobAction.CANCEL) != Allowed()


levels = st.sampled_from(list(Level))
relations = st.sampled_from(list(RELATIONS))
statuses = st.sampled_from(list(JobStatus))
grants = st.frozensets(st.sampled_from(sorted(PERMISSIONS)))


@given(levels, relations, statuses, grants)
def test_the_actions_listed_are_those_decide_permissions_and_status_allow(
    level: Level, relation: str, status: JobStatus, granted: frozenset[str]
) -> None:
    owner, team = RELATIONS[relation]
    actor = Actor(ME, level, frozenset({MINE}))
    job = Job(owner, team, status)

    listed = job_actions(actor, granted, job)

    for action in JobAction:
        may = expected(level, relation, action) and (ALL in granted or NEEDS[action] in granted)
        if action is JobAction.CANCEL:
            may = may and status not in TERMINAL_JOB
        if action is JobAction.RERUN:
            may = may and status in TERMINAL_JOB
        if action in (JobAction.APPROVE, JobAction.REJECT):
            may = may and status is JobStatus.PENDING_APPROVAL
        assert (action in listed) is may, (action, listed)


@pytest.mark.parametrize("level", list(Level))
def test_each_action_needs_a_permission_some_level_has(level: Level) -> None:
    assert set(NEEDS) == set(JobAction)
    assert {NEEDS[JobAction.APPROVE], NEEDS[JobAction.CANCEL]} == {QUEUE_APPROVE, QUEUE_SUBMIT}
    # A viewer holds queue.submit (for their own jobs), never queue.approve.
    if level is Level.VIEWER:
        assert QUEUE_APPROVE not in LEVEL_PERMISSIONS[level]


@pytest.mark.parametrize("level", list(Level))
@pytest.mark.parametrize("relation", list(RELATIONS))
def test_a_jobs_code_is_read_by_its_owner_its_teams_members_and_admins(
    level: Level, relation: str
) -> None:
    """#34: the workdir's files, unlike the job's fields, are its team's: any member of its
    team (a viewer too), its owner, an admin; never another team's lead."""
    owner, team = RELATIONS[relation]
    actor = Actor(ME, level, frozenset({MINE}))
    want = level is Level.ADMIN or owner == ME or team == MINE
    decision = may_read_code(actor, Job(owner, team))
    assert isinstance(decision, Allowed) is want, (level, relation)
    if not want:
        assert isinstance(decision, Refused) and "member of its team" in decision.reason
