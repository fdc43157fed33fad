"""Scenario 6: scenarios 1 and 2 on one PostgreSQL orchestrator, then on two replicas."""

from __future__ import annotations

from bench.report import Result
from bench.scenarios.latency import dispatch_latency
from bench.scenarios.options import Options
from bench.scenarios.steps import PG_DEFAULT
from bench.scenarios.throughput import throughput


async def side_by_side(opts: Options) -> list[Result]:
    """Scenario 6: scenarios 1 and 2 on PostgreSQL, on one orchestrator then on two replicas
    (submits to one, workers streaming from the other: every offer crosses replicas)."""
    results: list[Result] = []
    url = opts.database_url or PG_DEFAULT
    for replicas, prefix in ((1, "6"), (2, "6/r")):
        pg = Options(opts.size, url, opts.work_dir, opts.profile_dir, replicas=replicas, paced=True)
        for run in (dispatch_latency, throughput):
            r = await run(pg)
            r.scenario = f"{prefix}/{r.scenario}" if replicas > 1 else f"6/{r.scenario}"
            results.append(r)
    return results
