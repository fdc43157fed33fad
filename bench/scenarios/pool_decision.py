"""Scenario 12: the pools' decision (`domain/capacity.py` `decide`, #36) on a deep queue, in
process: `bench/capacity.py`'s two fleets (1,000 waiting jobs over 20 pools), its median CPU
time against the goal of 50 ms. No server: what one reconcile pass spends deciding."""

from __future__ import annotations

import asyncio
import statistics

from bench import capacity
from bench.report import Result
from bench.scenarios.options import Options

GOAL_MS = 50.0


async def pool_decision(opts: Options) -> Result:
    """Scenario 12: `decide` for 1,000 waiting jobs over 20 pools, typical and distinct."""
    runs = opts.size.s12_runs
    result = Result("12", "pool decision", "in process", {"jobs": 1000, "pools": 20, "runs": runs})
    for name, distinct in (("typical", False), ("distinct", True)):
        times = await asyncio.to_thread(capacity.measure, capacity.fleet(distinct), runs)
        median = round(statistics.median(times), 2)
        result.metrics[name] = {"median_ms": median, "min_ms": round(min(times), 2)}
        result.check(
            f"{name} label sets: median CPU (ms)", median, f"≤ {GOAL_MS:g}", median <= GOAL_MS
        )
    return result
