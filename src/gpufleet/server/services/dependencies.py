"""Jobs that run after others (docs/jobs.md, Dependencies). The decision is
`domain/dependencies.py`'s; here it is applied: at a submit (the dependencies exist, the
submitter sees them, none already doomed it), and when a job ends, by whoever ends it, in
the transaction that ends it (`services/lifecycle.py` `move_job`): each dependent waits on
its next dependency, is released to the queue, or is cancelled naming the one that doomed it.

Lock order: a dependency is always older than its dependents, and rows are locked oldest
first: a submit its dependencies (`mark_upstream`, by age), an end its job, then each
dependent by age. Two replicas ending two dependencies of one job at once take its row in
turn, so the second reads the first's end."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.artifacts.keys import checked_path
from gpufleet.domain.dependencies import (
    Decision,
    Dependency,
    Doomed,
    On,
    Satisfied,
    Upstream,
    Waiting,
    check,
    decide,
)
from gpufleet.domain.matching import Wait, WaitCode
from gpufleet.domain.permissions import QUEUE_READ, allows
from gpufleet.domain.records import Job
from gpufleet.domain.states import TERMINAL_JOB, WAITING_JOB, JobStatus
from gpufleet.errors import Conflict, Forbidden, InvalidInput, NotFound, UnsafeArtifactPath
from gpufleet.server.context import Tx
from gpufleet.server.hub import JOBS_TOPIC, job_topic
from gpufleet.store import Queries


@dataclass(frozen=True, slots=True)
class Asked:
    """A submit's `depends_on` and `inputs`, checked, and whether its key may see the jobs
    they name (queue.read)."""

    on: tuple[Dependency, ...] = ()
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    may_read: bool = True


def asked(
    depends_on: Sequence[str | Mapping[str, str]],
    inputs: Mapping[str, Sequence[str]],
    permissions: Iterable[str],
) -> Asked | None:
    """What a submit body asks (None: nothing); `InvalidInput` for garbage (nothing stored)."""
    if not depends_on and not inputs:
        return None
    on, patterns = check(depends_on, inputs)
    for pattern in (p for group in patterns.values() for p in group):
        try:  # what an artifact path may be, its wildcards standing for a name's characters
            checked_path(pattern.replace("*", "x").replace("?", "x"))
        except UnsafeArtifactPath as exc:
            raise InvalidInput(
                f"input pattern {pattern[:80]!r} could name no artifact ({exc.message})"
            ) from exc
    return Asked(on, patterns, allows(permissions, QUEUE_READ))


async def admit(tx: Tx, deps: Sequence[Dependency], *, may_read: bool) -> str | None:
    """The dependency a new job waits on (None: every one is met, it may be offered now).
    Refused: a dependency the key may not see (403) or that does not exist (404), one
    already ended as it needs not (409). Each not ended is marked and locked (oldest first)."""
    if not deps:
        return None
    if not may_read:
        raise Forbidden(
            "this key may not see jobs (it lacks queue.read), so it cannot name dependencies; "
            "submit with a key that has queue.read"
        )
    found = {j.id: j for j in await tx.q.jobs_named([d.job_id for d in deps])}
    missing = [d.job_id for d in deps if d.job_id not in found]
    if missing:
        named = f"{', '.join(missing[:5])}, which {'do' if len(missing) > 1 else 'does'} not exist"
        raise NotFound(
            f"depends_on names {named}; list jobs with GET /api/queue",
            cli=f"--after names {named}; list jobs with `gpufleet jobs list`",
        )
    status = {j.id: j.status for j in found.values()}
    _refuse_doomed(_decide(deps, status))
    live = sorted((j for j in found.values() if j.status not in TERMINAL_JOB), key=_age)
    for job in live:
        now = await tx.q.mark_upstream(job.id)
        if now is not None:
            status[job.id] = now
    decision = _decide(deps, status)
    _refuse_doomed(decision)
    return decision.job_id if isinstance(decision, Waiting) else None


def _age(job: Job) -> tuple[datetime, str]:
    return (job.created_at, job.id)


def _decide(deps: Sequence[Dependency], status: dict[str, JobStatus]) -> Decision:
    return decide([Upstream(d.job_id, d.on, status[d.job_id]) for d in deps])


def _refuse_doomed(decision: Decision) -> None:
    if isinstance(decision, Doomed):
        raise Conflict(
            f"job {decision.job_id} already {decision.status.value}, so a job that needs it "
            "completed could never run; depend on it with on: ended, or submit without it"
        )


async def settle(tx: Tx, job_id: str) -> list[tuple[Job, str]]:
    """After job `job_id` ended (in this transaction): its waiting dependents each wait on
    their next dependency or are released (`tx.released`); those it doomed are returned with
    the reason, for `lifecycle.move_job` to cancel (and so theirs, in turn)."""
    doomed: list[tuple[Job, str]] = []
    for dependent_id, status in await tx.q.dependents(job_id):
        if status not in WAITING_JOB:
            continue
        job = await tx.q.get_job(dependent_id, lock=True)
        if job is None or job.status not in WAITING_JOB:
            continue
        match decide(await tx.q.upstreams(dependent_id)):
            case Doomed() as d:
                doomed.append((job, d.reason))
            case Waiting(upstream):
                if upstream != job.waits_on:
                    await tx.q.update_job(dependent_id, waits_on=upstream)
                tx.wake(job_topic(dependent_id))  # its page: what it waits on, and its status
            case Satisfied():
                await tx.q.update_job(dependent_id, waits_on=None, updated_at=tx.now)
                tx.released.append(dependent_id)
                tx.wake(job_topic(dependent_id), JOBS_TOPIC)
    return doomed


@dataclass(frozen=True, slots=True)
class Links:
    """What a job waits on, and what waits on it: its page's dependency view."""

    depends_on: list[dict[str, Any]]  # {"job", "on", "status"}, in the submit's order
    dependents: list[dict[str, Any]]  # {"job", "status"}, oldest first


async def links(q: Queries, job: Job) -> Links:
    ups = await q.upstreams(job.id)
    downs = await q.dependents(job.id)
    return Links(
        [{"job": u.job_id, "on": u.on.value, "status": u.status.value} for u in ups],
        [{"job": d, "status": s.value} for d, s in downs],
    )


async def wait_of(q: Queries, job: Job) -> Wait | None:
    """What a queued job waits for when a dependency holds it: that job, named."""
    if job.waits_on is None or job.status not in WAITING_JOB:
        return None
    on, status = On.COMPLETED.value, "it no longer exists"
    for up in await q.upstreams(job.id):
        if up.job_id == job.waits_on:
            on, status = up.on.value, f"it is {up.status.value}"
    return Wait(WaitCode.DEPENDENCY, {"job": job.waits_on, "on": on, "status": status})
