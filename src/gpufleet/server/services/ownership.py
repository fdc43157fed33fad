"""Who may act on a job, applied: the caller as an `Actor`, and the refusal in words.

The rules are `domain/ownership.py`'s; the services that write a job (cancel, re-run,
approve, reject, pin and delete its artifacts) call `require` before they change anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.domain.ownership import SAID, Actor, JobAction, Refused, decide, job_actions, owner_of
from gpufleet.domain.records import Job, User
from gpufleet.errors import Forbidden
from gpufleet.server.context import Context
from gpufleet.store.queries import Queries

# The command that does each action, for the CLI's words (None: the CLI has none).
_COMMANDS: dict[JobAction, str | None] = {
    JobAction.CANCEL: "gpufleet jobs cancel {job}",
    JobAction.RERUN: "gpufleet jobs rerun {job}",
    JobAction.APPROVE: "gpufleet queue approve {job}",
    JobAction.REJECT: "gpufleet queue reject {job}",
    JobAction.PIN: None,
    JobAction.DELETE_ARTIFACTS: None,
}
# The button that does each action, for the web UI's words.
_BUTTONS: dict[JobAction, str] = {
    JobAction.CANCEL: "Cancel job",
    JobAction.RERUN: "Re-run",
    JobAction.APPROVE: "Approve",
    JobAction.REJECT: "Reject",
    JobAction.PIN: "Pin",
    JobAction.DELETE_ARTIFACTS: "Delete",
}


async def actor_of(q: Queries, user: User) -> Actor:
    return Actor(user.id, user.level, await q.team_ids_of(user.id))


async def require(q: Queries, user: User, job: Job, action: JobAction) -> None:
    """Refuse (403) unless `user` may take `action` on `job`, saying who may."""
    decision = decide(await actor_of(q, user), job, action)
    if isinstance(decision, Refused):
        raise await _refusal(q, job, action, decision)


async def _refusal(q: Queries, job: Job, action: JobAction, refused: Refused) -> Forbidden:
    owner = owner_of(job)
    names = dict(await q.user_names([owner]))
    if job.team_id:
        names.update(await q.team_names([job.team_id]))
    whose = f"{names.get(owner, owner)}'s job"
    if job.team_id:
        whose += f" for team {names.get(job.team_id, job.team_id)}"
    said = f"you may not {SAID[action][0].format(job=job.id)} ({whose}): {refused.reason}"
    command = _COMMANDS[action]
    cli = f"{said} to run `{command.format(job=job.id)}`" if command else None
    ui = f"{said} to press {_BUTTONS[action]}"
    return Forbidden(said, ui=ui, cli=cli)


async def actions_on(
    ctx: Context, user: User, permissions: Iterable[str], jobs: Sequence[Job]
) -> dict[str, list[str]]:
    """What `user` may do to each of `jobs` now (the answer's `actions`), by job id."""
    async with ctx.store.read() as q:
        actor = await actor_of(q, user)
    granted = frozenset(permissions)
    return {j.id: [a.value for a in job_actions(actor, granted, j)] for j in jobs}
