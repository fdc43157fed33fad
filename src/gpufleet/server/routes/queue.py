"""The queue (`queue.submit`, `queue.read`): submit, list, cancel, rerun, a job and its logs.
Stored configs are `routes/configs.py`, the audit log `routes/audit.py`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Query
from starlette.responses import Response, StreamingResponse

from gpufleet.domain import job_secrets
from gpufleet.domain.filters import JobFilter
from gpufleet.domain.permissions import QUEUE_READ, QUEUE_SUBMIT
from gpufleet.domain.states import TERMINAL_JOB, Target
from gpufleet.errors import InvalidInput
from gpufleet.server import sse
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.hub import job_topic
from gpufleet.server.routes import api_router
from gpufleet.server.routes import sweeps as swept
from gpufleet.server.schemas.base import SSE_RESPONSE
from gpufleet.server.schemas.jobs import (
    AttemptOut,
    BulkOut,
    BulkResult,
    JobDetail,
    JobIds,
    JobList,
    JobOut,
    LogLineOut,
    LogsOut,
    RerunIn,
    SubmitIn,
    SubmitOut,
    UnheardOut,
)
from gpufleet.server.schemas.sweeps import SweepOut
from gpufleet.server.services import auth, dependencies, joblogs, ownership, queue, reruns
from gpufleet.server.services import submit as submitting
from gpufleet.server.services.auth import Principal
from gpufleet.server.services.submit import Submission

router = api_router(tags=["queue"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
Submitter = Annotated[Principal, Depends(require(QUEUE_SUBMIT))]
Limit = Annotated[int, Query(ge=1, le=500)]
# A multi-node job's node, by rank (checked against the job's nodes by services/joblogs.py).
Node = Annotated[int | None, Query(ge=0, le=2**31)]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000)]


@router.post(
    "/api/queue/submit",
    response_model=SubmitOut | SweepOut,
    status_code=201,
    responses={
        200: {
            "model": SubmitOut | SweepOut,
            "description": "The idempotency key's earlier job or sweep.",
        }
    },
)
async def submit(
    ctx: Ctx, who: Submitter, client: Client, body: SubmitIn, response: Response
) -> SubmitOut | SweepOut:
    """Queue a job; with `sweep`, a sweep of jobs (the answer is the sweep: docs/jobs.md)."""
    sub = Submission(
        config_name=body.config_name,
        config=body.config,
        target=body.target,
        worker_labels=body.worker_labels,
        gpu_count=body.gpu_count,
        priority=body.priority,
        max_retries=body.max_retries,
        retry_on=frozenset(body.retry_on),
        team=body.team,
        preemptible=body.preemptible,
        after=dependencies.asked(body.after(), body.inputs, who.permissions),
        idempotency_key=body.idempotency_key,
    )
    if (spec := swept.spec_of(body)) is not None:
        return await swept.make(ctx, who, client, sub, spec, response)
    queued = await submitting.submit(ctx, sub, who.actor, client, user_id=who.user.id)
    if queued.idempotent_hit:
        response.status_code = 200
    if queued.names is None:
        names = await queue.job_names(ctx, [queued.job])
    else:
        names = queued.names | {who.actor: who.key.name}
    return SubmitOut.of(queued.job, names).model_copy(
        update={"idempotent_hit": queued.idempotent_hit}
    )


Text = Annotated[str | None, Query(max_length=128)]


@router.get("/api/queue", response_model=JobList)
async def list_jobs(
    ctx: Ctx,
    who: Reader,
    status: Annotated[
        list[str] | None,
        Query(
            max_length=16,
            description="ours, or SimpleTuner's `pending` (queued) and `blocked` "
            "(pending_approval)",
        ),
    ] = None,
    include_completed: Annotated[
        bool | None, Query(description="false: leave out ended jobs (SimpleTuner's)")
    ] = None,
    worker_id: Text = None,
    worker: Annotated[str | None, Query(max_length=128, description="id or name")] = None,
    target: Target | None = None,
    config_name: Text = None,
    label: Annotated[
        list[str] | None, Query(max_length=16, description="key=value, asked for exactly")
    ] = None,
    id_prefix: Annotated[str | None, Query(max_length=32, description="a job id's start")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> JobList:
    f = JobFilter(
        statuses=queue.status_filter([s[:32] for s in status or []], include_completed),
        worker_id=worker_id,
        target=target.value if target else None,
        config_name=config_name,
        worker=worker,
        labels=queue.label_filter(label or []),
        id_prefix=id_prefix,
    )
    jobs, total = await queue.list_jobs(ctx, f, limit, offset)
    names = await queue.job_names(ctx, jobs)
    actions = await ownership.actions_on(ctx, who.user, who.permissions, jobs)
    return JobList(
        jobs=[JobOut.listed(j, names, actions[j.id]) for j in jobs],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.post("/api/queue/rerun", response_model=BulkOut)
async def rerun_jobs(ctx: Ctx, who: Submitter, client: Client, body: JobIds) -> BulkOut:
    return _bulk(await reruns.rerun_many(ctx, body.job_ids, who.actor, client, by=who.user))


@router.post("/api/queue/cancel", response_model=BulkOut)
async def cancel_jobs(ctx: Ctx, who: Submitter, client: Client, body: JobIds) -> BulkOut:
    return _bulk(await reruns.cancel_many(ctx, body.job_ids, who.actor, client, by=who.user))


def _bulk(outcomes: list[reruns.Outcome]) -> BulkOut:
    results = [
        BulkResult(
            job_id=o.job_id, ok=o.job is not None, job=o.job and JobOut.listed(o.job), error=o.error
        )
        for o in outcomes
    ]
    done = sum(r.ok for r in results)
    return BulkOut(results=results, done=done, failed=len(results) - done)


@router.get("/api/queue/{job_id}", response_model=JobDetail)
async def get_job(ctx: Ctx, who: Reader, job_id: str) -> JobDetail:
    view = await queue.view_job(ctx, job_id)
    actions = await ownership.actions_on(ctx, who.user, who.permissions, [view.job])
    return JobDetail(
        **JobOut.of(view.job, view.names, actions[view.job.id]).model_dump(),
        config=job_secrets.shown(view.job.config, view.job.user_id, who.user.id),
        attempt_history=[AttemptOut.of(a, view.names, view.resumed) for a in view.attempts],
        waiting=view.waiting,
        rerun_as=view.reruns,
        worker_unheard=view.unheard and UnheardOut.model_validate(view.unheard),
        cost=view.cost,
        depends_on=view.links.depends_on if view.links else [],
        dependents=view.links.dependents if view.links else [],
    )


@router.post("/api/queue/{job_id}/cancel", response_model=JobOut)
async def cancel_job(ctx: Ctx, who: Submitter, client: Client, job_id: str) -> JobOut:
    return JobOut.of(await queue.cancel(ctx, job_id, who.actor, client, by=who.user))


@router.post("/api/queue/{job_id}/rerun", response_model=JobOut, status_code=201)
async def rerun_job(
    ctx: Ctx, who: Submitter, client: Client, job_id: str, body: RerunIn | None = None
) -> JobOut:
    """A new job with this one's config and requirements, linked to it; with a body, edited
    as it says (edit and re-run)."""
    edits = reruns.Edits(**body.model_dump(exclude_none=True)) if body else reruns.NO_EDITS
    job = await reruns.rerun(ctx, job_id, who.actor, client, by=who.user, edits=edits)
    return JobOut.of(job, await queue.job_names(ctx, [job]))


@router.get("/api/queue/{job_id}/logs", response_model=LogsOut, responses=SSE_RESPONSE)
async def job_logs(
    ctx: Ctx,
    who: Reader,
    job_id: str,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=joblogs.MAX_PAGE)] = 1000,
    follow: bool = False,
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
    tail: Annotated[int | None, Query(ge=0, le=2**31)] = None,
    attempt_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    q: str | None = None,
    node: Node = None,
) -> Any:
    """A page of lines after `after`, before `before` (the newest ones before it) or the
    last `tail` lines, oldest first, optionally one attempt's, one node's (a multi-node
    job's rank), or only those holding `q` (as typed, ignoring case); with follow=true, an
    event stream of the lines after `after` until the job ends."""
    if follow and q is not None:
        raise InvalidInput("q searches the stored lines; give it without follow=true")
    if follow:
        await joblogs.job_for_node(ctx, job_id, node)  # 404 or 400 before the stream starts
        return sse.stream(_follow(ctx, who, job_id, after, node))
    query = joblogs.PageQuery(
        limit=limit,
        after=after,
        before=before,
        tail=tail,
        attempt_id=attempt_id,
        q=q or None,
        node=node,
    )
    page = await joblogs.read_page(ctx, job_id, query)
    return LogsOut(
        job_id=job_id,
        nodes=page.nodes,
        lines=[LogLineOut(**vars_of(line)) for line in page.lines],
        next_after=page.next_after,
        next_before=page.next_before,
        more=page.more,
    )


@router.get(
    "/api/queue/{job_id}/logs/download",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "The whole log as text."}},
)
async def download_job_logs(
    ctx: Ctx, who: Reader, job_id: str, node: Node = None
) -> StreamingResponse:
    """The whole log as a text file, each attempt's lines under a `==> attempt N … <==`
    line, streamed as it is read; one node's with `node` (a multi-node job's lines of every
    node each open with `[node K]`)."""
    text = await joblogs.log_text(ctx, job_id, node)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id) + ("" if node is None else f".node{node}")
    return StreamingResponse(
        (chunk.encode("utf-8", "replace") async for chunk in text),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}.log"'},
    )


def vars_of(line: Any) -> dict[str, Any]:
    return {
        "seq": line.seq,
        "attempt_id": line.attempt_id,
        "stream": line.stream,
        "text": line.text,
        "ts": line.ts,
        "node": line.node,
    }


async def _follow(
    ctx: Ctx, who: Principal, job_id: str, after: int, node: int | None
) -> AsyncIterator[bytes]:
    """Log lines as they arrive (one node's, with `node`); ends with an `end` event once
    the job is over (without one when the orchestrator shuts down or the key is revoked)."""
    async with auth.subscription(ctx, who, job_topic(job_id)) as sub:
        while not sub.closed:
            lines, more = await queue.read_logs(ctx, job_id, after, 1000, node)
            for line in lines:
                yield sse.frame(
                    LogLineOut(**vars_of(line)).model_dump(mode="json"),
                    event="log",
                    event_id=line.seq,
                )
                after = line.seq
            if more:
                continue
            job = await queue.get_job(ctx, job_id)
            if job.status in TERMINAL_JOB:
                yield sse.frame({"type": "end", "status": job.status.value}, event="end")
                return
            if not await sub.wait(ctx.keepalive.interval):
                yield sse.ping()
