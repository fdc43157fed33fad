"""What every dispatch applies before it claims: the sharing policy's limits (`policy_gate`,
`refused`), and its retries of races lost to a concurrent dispatch (`retrying`). Shared by
one-node dispatch (dispatch.py) and gang dispatch (gangs.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpufleet.domain.limits import limit_hit
from gpufleet.domain.policy import Policy, Snapshot
from gpufleet.domain.records import Job
from gpufleet.domain.sweeps import has_room
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


class SweepRoom:
    """Whether a job's sweep has `max_parallel` of its jobs on workers already (domain/
    sweeps.py `has_room`), read once a sweep in one dispatch step.

    On PostgreSQL the sweep's row is locked, SKIP LOCKED, before its jobs are counted: two
    dispatches never both count the last free place, and one never waits for the other
    (whose locks it may hold in the other order): the skipped job waits for the next
    dispatch, or the health loop's full pass."""

    def __init__(self, ctx: Context, tx: Tx, seen: Seen | None = None) -> None:
        self.ctx, self.tx, self.seen = ctx, tx, seen
        self.known: dict[str, bool] = {}

    async def full(self, job: Job) -> bool:
        if job.sweep_id is None:
            return False
        if job.sweep_id not in self.known:
            self.known[job.sweep_id] = await self._full(job.sweep_id)
        held = self.known[job.sweep_id]
        if held:  # as a limit's hold: a freed worker makes a full pass (dispatch_worker)
            self.ctx.limit_holds.held()
            if self.seen is not None:
                self.seen.limited = self.seen.held = True
        return held

    async def _full(self, sweep_id: str) -> bool:
        q = self.tx.q
        sweep = await q.get_sweep(sweep_id)
        if sweep is None or sweep.max_parallel is None:
            return False
        if q.locks_rows and await q.get_sweep(sweep_id, skip_locked=True) is None:
            return True  # another dispatch counts it now
        return not has_room(await q.sweep_placed(sweep_id), sweep.max_parallel)


async def retrying(attempt: Callable[[], Awaitable[T]], lost: T) -> T:
    """Run a dispatch step again when a concurrent dispatch won a race; `lost` once the
    races are all lost."""
    for _ in range(_RACE_RETRIES):
        try:
            return await attempt()
        except ClaimLost:
            continue
    return lost
