"""Idempotent submit (docs/jobs.md, domain/idempotency.py): a second submit of a user's key
within 24 hours answers the job the first made, whatever its body (SimpleTuner's rule).

The key's row is the first write of the submit's transaction (`claim`): two submits of one
key at once, on one replica or two, make one job; the one that loses unwinds its transaction
(`KeyTaken`) and answers the winner's job."""

from __future__ import annotations

from gpufleet.domain.idempotency import check_key, live_since
from gpufleet.domain.records import Job
from gpufleet.server.context import Context, Tx


class KeyTaken(Exception):  # not an error: the submit answers the hit
    """Raised inside a submit's transaction whose key another submit claimed first: the
    transaction is undone, and the submit answers `job_id`."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


async def earlier(ctx: Context, user_id: str, key: str) -> Job | None:
    """The job the user's key names now, if any (checked: a hostile key is a 422)."""
    check_key(key)
    async with ctx.store.read() as q:
        job_id = await q.job_of_key(user_id, key, live_since(ctx.clock()))
        return await q.get_job(job_id) if job_id is not None else None


async def claim(tx: Tx, user_id: str, key: str, job_id: str) -> None:
    """The key names `job_id` from now on; `KeyTaken` when another submit has it."""
    taken = await tx.q.claim_key(user_id, key, job_id, tx.now, live_since(tx.now))
    if taken is not None:
        raise KeyTaken(taken)
