"""Scenario 6's throughput halves alone (#39 goal 2): server CPU a job on one PostgreSQL
orchestrator (6/2), then on two replicas sharing it (6/r/2: submits to one, workers on the
other), and their ratio; a smaller fleet than the medium size's, for a box too busy for it.

    .venv/bin/python -m bench.replicas_cpu [WORKERS [JOBS [PROFILE_DIR]]]   # 250, 1500
    .venv/bin/python -m bench.replicas_cpu WORKERS JOBS --baseline DIR [--rounds N]

With `--baseline DIR` (another checkout, as `python -m bench --baseline`), each round runs both
halves on DIR's code, then on this checkout's, and prints each side's figures and current ÷
baseline: #39's goal 1 on PostgreSQL (6/2's CPU a job and efficiency) and goal 2 (the ratio).

PostgreSQL on 127.0.0.1:5432 (`bench.scenarios.steps.PG_DEFAULT`); each half gets a fresh
database. The jobs are submitted for at most the medium size's 300 s: the CPU a job is over
those completed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
from pathlib import Path

from bench.compare import BASELINE, CURRENT, ratio, sides
from bench.scenarios.options import MEDIUM, Options
from bench.scenarios.side_by_side import compare_replicas
from bench.scenarios.steps import PG_DEFAULT
from bench.scenarios.throughput import throughput


async def main(
    workers: int, jobs: int, profile: Path | None, code: Path | None = None, side: str = ""
) -> dict[str, float | None]:
    """Both halves on `code`'s server (None: this checkout's as installed); their figures."""
    size = dataclasses.replace(
        MEDIUM, s2_workers=workers, s2_jobs=jobs, floor_seconds=2.0, floor_processes=1
    )
    results = []
    for replicas, name in ((1, "6/2"), (2, "6/r/2")):
        opts = Options(
            size, PG_DEFAULT, profile_dir=profile, replicas=replicas, paced=True, code=code
        )
        result = await throughput(opts)
        result.scenario = name
        results.append(result)
    compare_replicas(results)
    one, two = (r.metrics for r in results)
    print(
        f"{side}6/2 {one['server_cpu_per_job_ms']} ms a job ({one['completed']} jobs, "
        f"efficiency {one.get('rate_vs_floor')}), "
        f"6/r/2 {two['server_cpu_per_job_ms']} ms ({two['completed']} jobs): "
        f"ratio {two.get('cpu_per_job_vs_one_replica')}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )

    return {
        "cpu_a_job_6_2": one.get("server_cpu_per_job_ms"),
        "efficiency_6_2": one.get("rate_vs_floor"),
        "jobs_per_s_6_2": one.get("jobs_per_s"),
        "cpu_a_job_6_r_2": two.get("server_cpu_per_job_ms"),
        "ratio": two.get("cpu_per_job_vs_one_replica"),
    }


async def compared(workers: int, jobs: int, baseline: Path, rounds: int) -> None:
    """Round by round, baseline then current; then each figure's current ÷ baseline."""
    base_side, this_side = sides(baseline)
    got: dict[str, list[dict[str, float | None]]] = {BASELINE: [], CURRENT: []}
    for n in range(rounds):
        for side in (base_side, this_side):
            label = f"round {n + 1} {side.name} ({side.commit}): "
            got[side.name].append(await main(workers, jobs, None, side.src, label))
    for key in got[BASELINE][0]:
        base = [r[key] for r in got[BASELINE]]
        cur = [r[key] for r in got[CURRENT]]
        ratios = [ratio(c, b) for c, b in zip(cur, base, strict=True)]
        print(f"{key}: baseline {base}, current {cur}, current ÷ baseline {ratios}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.replicas_cpu")
    parser.add_argument("workers", nargs="?", type=int, default=250)
    parser.add_argument("jobs", nargs="?", type=int, default=1500)
    parser.add_argument("profile", nargs="?", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout: before and after")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if args.baseline is not None:
        asyncio.run(compared(args.workers, args.jobs, args.baseline, args.rounds))
    else:
        asyncio.run(main(args.workers, args.jobs, args.profile))
