"""The retention sweep: applies `domain.retention` to what the store holds.

Run by the leader replica only (one sweep at a time across replicas), every
`--retention-interval`; a sweep looks at a bounded batch of jobs, so a long backlog is worked
off over several sweeps without one holding the database for long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpufleet.artifacts.store import STAGING_PREFIX
from gpufleet.domain import retention
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.retention import Plan, Policy, StagedObject
from gpufleet.server.context import Context
from gpufleet.server.services import artifacts, workdirs

log = logging.getLogger("gpufleet.server.retention")
BATCH = 200  # jobs looked at by one sweep


@dataclass(frozen=True, slots=True)
class Swept:
    plan: Plan
    artifacts: int
    bytes: int


def policy_of(ctx: Context) -> Policy:
    return Policy.of(ctx.settings.artifact_retention_days, ctx.settings.keep_checkpoints)


async def sweep(ctx: Context) -> Swept:
    """Delete what the rules say is due; the deletions made (audited per job)."""
    policy = policy_of(ctx)
    now = ctx.clock()
    cutoff = now - policy.retention if policy.retention is not None else None
    async with ctx.store.read() as q:
        jobs = await q.retention_candidates(cutoff, policy.keep_checkpoints, BATCH)
        ids = [job.id for job in jobs]
        files = await q.artifacts_of_jobs(ids) if ids else []
        checkpoints = await q.checkpoints_of_jobs(ids) if ids else []
        gangs = {job.id for job in jobs if job.nodes > 1}
        parts = await q.checkpoint_node_ranks([c.id for c in checkpoints if c.job_id in gangs])
    staged = [
        StagedObject(found.key, found.modified)
        for found in await ctx.artifacts.list(STAGING_PREFIX)
    ]
    decided = retention.plan(now, policy, jobs, files, checkpoints, staged, parts)
    doomed = [a for a in files if a.id in decided.artifact_ids]

    def reason(job_id: str) -> str:
        if job_id in decided.expired_jobs:
            return f"retention: the job ended over {policy.retention} ago"
        return f"retention: older than the job's newest {policy.keep_checkpoints} checkpoints"

    if doomed or decided.checkpoint_ids:
        await artifacts.remove(
            ctx, doomed, sorted(decided.checkpoint_ids), SYSTEM_ACTOR, None, reason=reason
        )
    for key in decided.staged_keys:
        await ctx.artifacts.delete(key)
    # Workdir snapshots no job holds any more go with the artifacts of the jobs that ended.
    if snapshots := await workdirs.sweep(ctx, cutoff):
        log.info("retention: deleted %d workdir snapshots", len(snapshots))
    swept = Swept(decided, len(doomed), sum(a.size for a in doomed))
    if not decided.empty:
        log.info(
            "retention: deleted %d artifacts (%d bytes), %d checkpoints, %d staged uploads",
            swept.artifacts,
            swept.bytes,
            len(decided.checkpoint_ids),
            len(decided.staged_keys),
        )
    return swept
