"""Scenario 4: dispatch latency on an empty queue, then on a deep one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import create_async_engine

from bench.report import Result
from bench.scenarios.latency import latency_run
from bench.scenarios.options import Options
from bench.scenarios.steps import NOWHERE, check_refused, fleet_of, say
from bench.server import BenchServer
from bench.workers import create_workers


async def insert_unmatched_jobs(
    database_url: str, depth: int, teams: Sequence[str] = (), user_id: str | None = None
) -> float:
    """Put `depth` queued jobs no connected worker matches straight into the database.

    Through the API this would take minutes; the rows are what submit writes (the store's
    own `queue_jobs`, minus the audit events), older than every job the scenario times, so
    they sit at the head of the queue. `teams` (ids): the jobs belong to these in turn, each
    submitted by `user_id`.
    """
    from gpufleet.domain.secrets import new_id
    from gpufleet.domain.states import RetryOn, Target
    from gpufleet.store.queries import NewJob, Queries

    began = time.monotonic()
    engine = create_async_engine(database_url)
    start = datetime.now(UTC) - timedelta(seconds=depth / 1000 + 60)
    try:
        for chunk in range(0, depth, 5000):
            new = [
                NewJob(
                    id=new_id("j"),
                    config={"command": ["true"]},
                    target=Target.WORKER,
                    worker_labels=NOWHERE,
                    gpu_count=0,
                    priority=0,
                    max_retries=0,
                    retry_on=[RetryOn.LOST],
                    submitted_by="bench",
                    created_at=start + timedelta(milliseconds=i),
                    user_id=user_id,
                    team_id=teams[i % len(teams)] if teams else None,
                )
                for i in range(chunk, min(depth, chunk + 5000))
            ]
            async with engine.begin() as conn:
                await Queries(conn).queue_jobs(new)
    finally:
        await engine.dispose()
    return time.monotonic() - began


def store_url(server: BenchServer) -> str:
    """The database a scenario's server keeps its queue in, for `insert_unmatched_jobs`."""
    return server.database_url or f"sqlite+aiosqlite:///{server.data_dir / 'gpufleet.db'}"


async def queue_depth(opts: Options) -> Result:
    """Scenario 4: scenario 1 on an empty queue, then with a deep queue of unmatched jobs."""
    size = opts.size
    result = Result(
        "4",
        "queue depth",
        opts.database,
        {"workers": size.s1_workers, "jobs": size.s1_jobs, "depth": size.s4_depth},
    )
    async with opts.server("s4") as server:
        # One offline worker with the label makes the unmatched jobs admissible.
        await create_workers(server.url, server.admin_headers(), 1, prefix="parked", labels=NOWHERE)
        async with fleet_of(server, size.s1_workers, opts) as (fleet, startup):
            result.metrics["startup"] = startup
            result.metrics["empty"] = await latency_run(server, fleet, size.s1_jobs)
            say(f"inserting {size.s4_depth:,} unmatched queued jobs")
            inserted = await insert_unmatched_jobs(store_url(server), size.s4_depth)
            result.metrics["insert_s"] = round(inserted, 2)
            deep = await latency_run(server, fleet, size.s1_jobs, budget=size.s4_budget)
            result.metrics["deep"] = deep
            if deep["submitted"] < size.s1_jobs:
                result.notes.append(
                    f"deep queue: only {deep['submitted']} of {size.s1_jobs} jobs could be "
                    f"submitted in {size.s4_budget:g} s"
                )
            result.metrics["errors"] = (await fleet.status())["errors"][:10]
    empty = result.metrics["empty"]["answer_to_event"]["p99_ms"]
    deep = result.metrics["deep"]["answer_to_event"]["p99_ms"]
    result.check("p99 empty queue (ms)", empty, "-", None)
    ok = None if empty is None or deep is None else deep <= 1.5 * max(empty, 0.001)
    result.check(f"p99 with {size.s4_depth:,} queued (ms)", deep, "≤ 1.5x empty", ok)
    check_refused(result, result.metrics["empty"]["refused"] + result.metrics["deep"]["refused"])
    return result
