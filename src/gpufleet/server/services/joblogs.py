"""A job's log read back: one bounded page at a time, or the whole of it as streamed text.

A page is read after a cursor (oldest first), before one (the newest lines before it), or as
the last `tail` lines; optionally one attempt's only, or only the lines holding a text (`q`,
sought as typed, ignoring case: a search pages like the log it searches). Cursors are line
`seq` numbers, so a page never depends on lines arriving meanwhile. A page holds at most
`limit` lines and `bounds.MAX_LOG_PAGE_BYTES` of text (at least one line): past that it stops
early, and `more` (reading on) or `next_before` (reading back) says that lines are left.
A multi-node job's log holds every node's lines interleaved, each with its node's rank;
`node` reads one node's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from gpufleet.domain.bounds import MAX_LOG_PAGE_BYTES, log_search_problem
from gpufleet.domain.records import Attempt, Job, LogLine
from gpufleet.errors import InvalidInput, NotFound
from gpufleet.server.context import Context
from gpufleet.server.services import queue
from gpufleet.store.queries import Queries

MAX_PAGE = 5000
DOWNLOAD_PAGE = 5000


@dataclass(frozen=True, slots=True)
class LogPage:
    lines: list[LogLine]
    next_after: int  # read on from here (the last line's seq, or the cursor given)
    next_before: int | None  # read back from here; None: the page starts at the first line
    more: bool  # lines after `next_after` were there when the page was read
    nodes: int  # the job's nodes


@dataclass(frozen=True, slots=True)
class PageQuery:
    limit: int
    after: int = 0
    before: int | None = None
    tail: int | None = None
    attempt_id: str | None = None
    q: str | None = None  # only the lines holding it
    node: int | None = None  # only that node's lines (a multi-node job's rank)


def _check(query: PageQuery) -> None:
    if query.q is not None and (problem := log_search_problem(query.q)):
        raise InvalidInput(problem)
    if query.tail is not None and (query.before is not None or query.after):
        raise InvalidInput("tail reads the end of the log: give it without after or before")
    if query.before is not None and query.before <= query.after:
        raise InvalidInput(
            f"before ({query.before}) must be greater than after ({query.after}): before reads "
            "the lines preceding a line, after the lines following one"
        )
    if not 1 <= query.limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")


async def _attempt_of(q: Queries, job_id: str, attempt_id: str) -> None:
    if not any(a.id == attempt_id for a in await q.attempts_for_job(job_id)):
        raise NotFound(
            f"job {job_id} has no attempt {attempt_id}; its attempts are listed in "
            f"attempt_history of GET /api/queue/{job_id}"
        )


def check_node(job: Job, node: int | None) -> None:
    """Refuse a node the job does not have (its nodes are ranks 0 to nodes - 1)."""
    if node is not None and not 0 <= node < job.nodes:
        ranks = "0" if job.nodes == 1 else f"0 to {job.nodes - 1}"
        raise InvalidInput(
            f"job {job.id} runs on {job.nodes} node{'s' if job.nodes > 1 else ''}: node must "
            f"be {ranks}, or left out for every node's lines"
        )


async def job_for_node(ctx: Context, job_id: str, node: int | None) -> Job:
    """The job (NotFound if none), once `node` is one of its nodes."""
    job = await queue.get_job(ctx, job_id)
    check_node(job, node)
    return job


async def read_page(ctx: Context, job_id: str, query: PageQuery) -> LogPage:
    _check(query)
    job = await job_for_node(ctx, job_id, query.node)
    node = query.node
    async with ctx.store.read() as q:
        if query.attempt_id is not None:
            await _attempt_of(q, job_id, query.attempt_id)
        after = query.after
        if query.tail is not None:
            after = await q.log_tail_cursor(job_id, query.tail, query.attempt_id, query.q, node)
        lines, left = await q.read_logs(
            job_id,
            after,
            query.limit,
            before=query.before,
            attempt_id=query.attempt_id,
            max_bytes=MAX_LOG_PAGE_BYTES,
            q=query.q,
            node=node,
        )
        # Reading back, what was left lies before the page (next_before says so); after
        # it lie the lines up to `before`, which the reader had already.
        more = left if query.before is None else False
        first = await q.first_log_seq(job_id, query.attempt_id, query.q, node) if lines else None
    earlier = lines[0].seq if lines and first is not None and first < lines[0].seq else None
    return LogPage(
        lines=lines,
        next_after=lines[-1].seq if lines else after,
        next_before=earlier,
        more=more,
        nodes=job.nodes,
    )


def attempt_header(attempt: Attempt | None, attempt_id: str, worker_name: str | None) -> str:
    """The line that opens an attempt's output in a downloaded log."""
    if attempt is None:
        return f"==> attempt {attempt_id} <=="
    worker = f"{worker_name} ({attempt.worker_id})" if worker_name else attempt.worker_id
    started = _iso(attempt.started_at or attempt.offered_at)
    return f"==> attempt {attempt.number} ({attempt.id}) on {worker}, started {started} <=="


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


async def log_text(ctx: Context, job_id: str, node: int | None = None) -> AsyncIterator[str]:
    """The whole log as text (one node's, with `node`), attempt headers included, read page
    by page as it is sent (memory stays one page whatever the log's length); a multi-node
    job's lines of every node each open with `[node K]`. Raises NotFound, or InvalidInput
    for a node the job lacks, before any text."""
    job = await job_for_node(ctx, job_id, node)
    return _text(ctx, job_id, node, labelled=job.nodes > 1 and node is None)


async def _text(
    ctx: Context, job_id: str, node: int | None, *, labelled: bool
) -> AsyncIterator[str]:
    after = 0
    current: str | None = None
    headers: dict[str, str] = {}
    while True:
        async with ctx.store.read() as q:
            lines, more = await q.read_logs(
                job_id, after, DOWNLOAD_PAGE, max_bytes=MAX_LOG_PAGE_BYTES, node=node
            )
            if any(line.attempt_id not in headers for line in lines):
                headers = await _headers(q, job_id)
        chunk: list[str] = []
        for line in lines:
            if line.attempt_id != current:
                current = line.attempt_id
                header = headers.get(current) or attempt_header(None, current, None)
                chunk.append(("\n" if chunk or after else "") + header + "\n")
            chunk.append((f"[node {line.node}] " if labelled else "") + line.text + "\n")
        if chunk:
            yield "".join(chunk)
        if not more:
            return
        after = lines[-1].seq


async def _headers(q: Queries, job_id: str) -> dict[str, str]:
    headers = {}
    for attempt in await q.attempts_for_job(job_id):
        worker = await q.get_worker(attempt.worker_id)
        headers[attempt.id] = attempt_header(attempt, attempt.id, worker.name if worker else None)
    return headers
