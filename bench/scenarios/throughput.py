"""Scenario 2: throughput, zero-length jobs through their whole lifecycle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from bench.report import Result, ms_summary
from bench.scenarios.options import Options, Size
from bench.scenarios.steps import (
    SubmitRefused,
    admin_client,
    check_cpu,
    check_job_cost,
    check_refused,
    first,
    fleet_of,
    other_replicas,
    say,
    server_cpu_seconds,
    submit,
    teams_in_turn,
)
from bench.server import BenchServer
from bench.workers import Fleet, Seen


async def throughput(opts: Options) -> Result:
    """Scenario 2: zero-length jobs through submit, offer, ack, running, completed."""
    size = opts.size
    result = Result(
        "2",
        "throughput",
        opts.database,
        {
            "workers": size.s2_workers,
            "jobs": size.s2_jobs,
            "submit_concurrency": size.s2_concurrency,
        },
    )
    async with (
        opts.server("s2") as server,
        fleet_of(server, size.s2_workers, opts) as (fleet, startup),
    ):
        result.metrics["startup"] = startup
        await fleet.collect()
        server.mark()
        run = await throughput_run(server, fleet, size)
        usage = server.usage()
        result.metrics["server_cpu_s"] = round(server_cpu_seconds(server), 3)
        result.metrics.update(run)
        result.metrics["server_cpu_share"] = round(usage.cpu_share, 3)
        result.metrics["server_rss_mib"] = round(usage.rss_bytes / 2**20, 1)
        result.metrics.update(other_replicas(server))
        result.metrics["errors"] = (await fleet.status())["errors"][:10]
    rate = result.metrics["jobs_per_s"]
    result.check("jobs/s, full lifecycle", rate, "≥ 1,000", rate >= 1000)
    e2e = result.metrics["end_to_end"]
    result.check("p99 end to end per job (ms)", e2e["p99_ms"], "-", None)
    check_cpu(result)
    check_job_cost(result, opts)
    check_refused(result, result.metrics["refused"])
    if result.metrics["completed"] < size.s2_jobs:
        result.notes.append(
            f"only {result.metrics['completed']} of {size.s2_jobs} jobs completed within "
            f"{size.s2_deadline:g} s; the rate is over those"
        )
    return result


async def throughput_run(
    server: BenchServer, fleet: Fleet, size: Size, teams: Sequence[str] = ()
) -> dict[str, Any]:
    """`size.s2_jobs` submits, `size.s2_concurrency` in flight, for at most `size.s2_deadline`
    seconds; the rate from the first submit to the last completion. `teams`: the submits
    name these teams in turn."""
    submitted: dict[str, float] = {}
    refused: list[str] = []
    todo = iter(range(size.s2_jobs))
    team_of_next = teams_in_turn(teams)
    began = time.monotonic()
    deadline = began + size.s2_deadline

    async with admin_client(server, size.s2_concurrency) as client:

        async def submitter() -> None:
            for _ in todo:
                if time.monotonic() > deadline:
                    return
                try:
                    job_id, sent, _answered = await submit(client, team=next(team_of_next))
                except SubmitRefused as exc:
                    refused.append(str(exc)[:200])
                    continue
                submitted[job_id] = sent

        await asyncio.gather(*(submitter() for _ in range(size.s2_concurrency)))
    submit_s = time.monotonic() - began
    say(f"{len(submitted)} jobs submitted in {submit_s:.1f} s; waiting for completions")
    seen: list[Seen] = []
    noted = time.monotonic()
    pause = 0.05  # growing to 0.5 s: a small run's completions come within the first pauses
    while time.monotonic() < deadline:
        more, _ = await fleet.collect()
        seen += more
        # Only this run's jobs: a job an earlier run left queued may end meanwhile.
        completed = len(first(seen, "done").keys() & submitted.keys())
        if completed >= len(submitted):
            break
        if time.monotonic() - noted > 15:
            noted = time.monotonic()
            say(f"{completed} of {len(submitted)} jobs completed")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 0.5)
    more, _ = await fleet.collect()
    done = first(seen + more, "done")
    finished = [done[j].mono for j in submitted if j in done]
    span = (max(finished) - began) if finished else float("nan")
    e2e = [done[j].mono - s for j, s in submitted.items() if j in done]
    return {
        "submitted": len(submitted),
        "refused": len(refused),
        "refusals": refused[:5],
        "completed": len(finished),
        "seconds": round(span, 2),
        "submit_seconds": round(submit_s, 2),
        "jobs_per_s": round(len(finished) / span, 1) if finished else 0.0,
        "end_to_end": ms_summary(e2e),
    }
