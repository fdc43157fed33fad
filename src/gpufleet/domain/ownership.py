"""Who may act on what is owned, jobs and stored configs: decided once, here, and applied by
the services.

A job belongs to the user who submitted it (`user_id`; older rows without one belong to the
built-in admin) and is for a team (`team_id`). Reads stay open to `queue.read`; every write
on an existing job goes through `decide`, and the answer's `actions` list comes from
`job_actions`, so the UI's buttons and the API agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpufleet.domain.levels import ADMIN_USER_ID, Level
from gpufleet.domain.permissions import QUEUE_APPROVE, QUEUE_SUBMIT, allows
from gpufleet.domain.states import TERMINAL_JOB, JobStatus


@dataclass(frozen=True, slots=True)
class Actor:
    user_id: str
    level: Level  # gpufleet.domain.levels.Level
    teams: frozenset[str]  # ids of the teams the user is a member of
    # a "lead of team T" is level == Level.LEAD and T in teams;
    # admins (Level.ADMIN) may do everything

    def leads(self, team_id: str | None) -> bool:
        return self.level is Level.LEAD and team_id is not None and team_id in self.teams


# ---- jobs ---------------------------------------------------------------------------------


class JobAction(StrEnum):
    """The writes on an existing job; the answer's `actions` names them so."""

    CANCEL = "cancel"
    RERUN = "rerun"
    APPROVE = "approve"
    REJECT = "reject"
    PIN = "pin"  # pin or unpin its artifacts
    DELETE_ARTIFACTS = "delete_artifacts"


# The permission each action needs beside ownership (a key's, cut to its user's level).
NEEDS: dict[JobAction, str] = {
    JobAction.CANCEL: QUEUE_SUBMIT,
    JobAction.RERUN: QUEUE_SUBMIT,
    JobAction.APPROVE: QUEUE_APPROVE,
    JobAction.REJECT: QUEUE_APPROVE,
    JobAction.PIN: QUEUE_SUBMIT,
    JobAction.DELETE_ARTIFACTS: QUEUE_SUBMIT,
}
JUDGING = frozenset({JobAction.APPROVE, JobAction.REJECT})  # someone else's judgement

# What each action does, in words: to a job named ("cancel job j_1"), and to "it".
SAID: dict[JobAction, tuple[str, str]] = {
    JobAction.CANCEL: ("cancel job {job}", "cancel it"),
    JobAction.RERUN: ("re-run job {job}", "re-run it"),
    JobAction.APPROVE: ("approve job {job}", "approve it"),
    JobAction.REJECT: ("reject job {job}", "reject it"),
    JobAction.PIN: ("pin or unpin the artifacts of job {job}", "pin or unpin its artifacts"),
    JobAction.DELETE_ARTIFACTS: ("delete the artifacts of job {job}", "delete its artifacts"),
}


class OwnedJob(Protocol):
    """What the decision reads of a job (`records.Job`)."""

    @property
    def user_id(self) -> str | None: ...
    @property
    def team_id(self) -> str | None: ...


def owner_of(job: OwnedJob) -> str:
    """The job's owner: its submitting user; an older job without one is the admin's."""
    return job.user_id or ADMIN_USER_ID


@dataclass(frozen=True, slots=True)
class Allowed:
    pass


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str  # who may instead, in words: the caller asks one of them


Decision = Allowed | Refused


def decide(actor: Actor, job: OwnedJob, action: JobAction) -> Decision:
    """Whether `actor` may take `action` on `job` (its permission is `NEEDS`'s to check).

    Admins may do everything. A job's owner and the leads of its team cancel, re-run, pin
    and delete its artifacts; a viewer, never a lead, acts only on their own jobs. Approving
    and rejecting is a judgement on someone else's job: a lead of its team does it, never
    for their own job; an admin for any job."""
    if actor.level is Level.ADMIN:
        return Allowed()
    own = owner_of(job) == actor.user_id
    lead = actor.leads(job.team_id)
    what = SAID[action][1]
    if action in JUDGING:
        if own:
            return Refused(f"only an admin may {what}, as it is your own job; ask an admin")
        if lead:
            return Allowed()
        return Refused(f"only an admin or a lead of its team may {what}; ask one of them")
    if own or lead:
        return Allowed()
    return Refused(f"only its owner, a lead of its team or an admin may {what}; ask one of them")


def _fits_status(action: JobAction, status: JobStatus) -> bool:
    """Whether the job's status leaves the action something to do (the service says why
    not in a Conflict; the buttons are simply not shown)."""
    if action is JobAction.CANCEL:
        return status not in TERMINAL_JOB
    if action is JobAction.RERUN:
        return status in TERMINAL_JOB
    if action in JUDGING:
        return status is JobStatus.PENDING_APPROVAL
    return True


class StatusedJob(OwnedJob, Protocol):
    @property
    def status(self) -> JobStatus: ...


def job_actions(actor: Actor, permissions: Iterable[str], job: StatusedJob) -> list[JobAction]:
    """What `actor`, holding `permissions`, may do to `job` now, in `JobAction`'s order."""
    granted = frozenset(permissions)
    return [
        action
        for action in JobAction
        if allows(granted, NEEDS[action])
        and _fits_status(action, job.status)
        and isinstance(decide(actor, job, action), Allowed)
    ]


def may_read_code(actor: Actor, job: OwnedJob) -> Decision:
    """Whether `actor` may read the code a job brings (its workdir snapshot's files): an
    admin, its owner, and the members of its team, whatever their level. A job's fields and
    config stay open to `queue.read`; its code is its team's."""
    if actor.level is Level.ADMIN or owner_of(job) == actor.user_id:
        return Allowed()
    if job.team_id is not None and job.team_id in actor.teams:
        return Allowed()
    return Refused("only its owner, a member of its team or an admin may; ask one of them")


# ---- stored configs -----------------------------------------------------------------------


class ConfigAction(StrEnum):
    OVERWRITE = "overwrite"  # PUT over a stored config's body (a new version)
    DELETE = "delete"  # the config and its versions
    SHARE = "share"  # set or clear the team it is shared with


@dataclass(frozen=True, slots=True)
class ConfigOwner:
    """Whose a stored config is: its creator, and the team it is shared with (None: none)."""

    owner_id: str
    team_id: str | None


def may_change_config(
    actor: Actor, config: ConfigOwner, action: ConfigAction, *, share_with: str | None = None
) -> bool:
    """Whether `actor` may take `action` on the stored config.

    Admins may do everything. Overwrite and delete: the owner, and the leads of the team it
    is shared with. Share (`share_with`: the team asked for, None to share with none): the
    owner, only with a team they are in; a lead of the shared team may change the config
    but not move it to another team."""
    if actor.level is Level.ADMIN:
        return True
    owner = actor.user_id == config.owner_id
    if action is ConfigAction.SHARE:
        return owner and (share_with is None or share_with in actor.teams)
    lead_of_team = (
        config.team_id is not None and actor.level is Level.LEAD and config.team_id in actor.teams
    )
    return owner or lead_of_team
