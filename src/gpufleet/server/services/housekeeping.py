"""The queue's housekeeping an admin asks for: deleting long-ended jobs, a dispatch pass now."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.errors import InvalidInput
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import JOBS_TOPIC
from gpufleet.server.services import artifacts, dispatch

CLEANUP_BATCH = 500


async def cleanup(ctx: Context, days: int, actor: str, client: str | None) -> int:
    """Delete jobs that ended more than `days` days ago (1 to 365), their files in the
    artifact store first; never an active job, nor one whose artifacts an admin pinned."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365:
        raise InvalidInput("days is a whole number from 1 to 365")
    before = ctx.clock() - timedelta(days=days)
    deleted = 0
    while True:
        async with ctx.store.read() as q:
            ids = await q.old_terminal_jobs(before, CLEANUP_BATCH)
            files = await q.artifacts_of_jobs(ids) if ids else []
            checkpoints = await q.checkpoints_of_jobs(ids) if ids else []
        if files or checkpoints:  # a blob that cannot go keeps its job, for the next try
            await artifacts.remove(
                ctx,
                files,
                [c.id for c in checkpoints],
                actor,
                client,
                reason=lambda _job: f"cleanup: the job ended over {days} days ago",
            )
        async with transaction(ctx) as tx:
            n = await tx.q.delete_jobs(ids)
            deleted += n
            if len(ids) < CLEANUP_BATCH:
                tx.audit("queue.cleaned", actor, None, client, days=days, deleted=deleted)
                if deleted:
                    tx.wake(JOBS_TOPIC)
                return deleted


async def process(ctx: Context) -> int:
    """Run a full dispatch pass now; the offers it made."""
    return await dispatch.dispatch_all(ctx)
