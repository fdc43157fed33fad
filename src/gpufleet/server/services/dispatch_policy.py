"""What every dispatch applies before it claims: the sharing policy's limits (`policy_gate`,
`refused`), and its retries of races lost to a concurrent dispatch (`retrying`). Shared by
one-node dispatch (dispatch.py) and gang dispatch (gangs.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpufleet.domain.limits import limit_hit
from gpufleet.domain.policy import Policy, Snapshot
from gpufleet.domain.records import Job
from gpufleet.server.context import Context, Tx
from gpufleet.server.services.lifecycle import ClaimLost
from gpufleet.server.services.standing import candidate, has_limits, is_plain, snapshot

_RACE_RETRIES = 5
T = TypeVar("T")


async def policy_gate(tx: Tx, read: tuple[Policy, bool] | None = None) -> Snapshot | None:
    """The policy this dispatch applies: None when it changes nothing (no fair share, no
    limit), and dispatch goes its usual way at its usual cost (one read of the policy row;
    none when the caller read it in this transaction already: `read`, what
    `dispatch_policy` answered).

    With a limit set, the policy row is locked until commit (PostgreSQL), first of all the
    rows a dispatch locks: dispatches that check limits go one at a time across replicas,
    each counting what runs after the previous one committed, so that no two can both pass
    a limit only one may. Only claims raise what runs, and every claim comes here first.
    """
    policy, own = read if read is not None else await tx.q.dispatch_policy()
    if is_plain(policy, own):
        return None
    if has_limits(policy, own) and tx.q.locks_rows:
        policy, own = await tx.q.dispatch_policy(lock=True)
    return await snapshot(tx.q, tx.now, policy, shares=False)


class Seen:
    """What a dispatch step saw of the policy, for its caller."""

    limited = False  # a limit on what runs is set
    held = False  # a job was passed over because a limit held it


def refused(ctx: Context, job: Job, snap: Snapshot | None, seen: Seen | None = None) -> bool:
    """Whether a limit keeps the job from starting now (noted in `seen`, and on the context
    until a full pass finds none held)."""
    held = snap is not None and limit_hit(candidate(job, snap), snap) is not None
    if held:
        ctx.limit_holds.held()
        if seen is not None:
            seen.held = True
    return held


async def retrying(attempt: Callable[[], Awaitable[T]], lost: T) -> T:
    """Run a dispatch step again when a concurrent dispatch won a race; `lost` once the
    races are all lost."""
    for _ in range(_RACE_RETRIES):
        try:
            return await attempt()
        except ClaimLost:
            continue
    return lost
