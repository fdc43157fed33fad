"""What operations tooling reads: readiness and metrics."""

from __future__ import annotations

from gpufleet.server.context import Context
from gpufleet.server.hub import WORKER_TOPIC_PREFIX


async def ready(ctx: Context) -> tuple[bool, str]:
    try:
        if not await ctx.store.schema_is_current():
            return False, "the database schema is behind: restart a server to migrate it"
    except Exception as exc:  # whatever stops the database answering means not ready
        return False, f"the database does not answer: {exc.__class__.__name__}"
    return True, "ready"


async def metrics(ctx: Context) -> bytes:
    async with ctx.store.read() as q:
        workers = await q.count_workers_by_status()
        jobs = await q.count_jobs_by_status()
        stored = await q.artifact_store_bytes()
        fleet = await q.latest_fleet_samples()
    ctx.metrics.set_counts(workers, jobs)
    ctx.metrics.set_fleet(fleet)
    ctx.metrics.artifact_store_bytes.set(stored)
    alive = await ctx.replicas.alive()
    ctx.metrics.set_replica(
        ctx.instance_id,
        leading=ctx.replicas.is_leader,  # a scrape reports, never takes, the lock
        alive=1 if alive is None else len(alive),
        streams=ctx.hub.count(prefix=WORKER_TOPIC_PREFIX),
    )
    return ctx.metrics.render()
