"""Scenario 6's throughput halves alone (#39 goal 2): server CPU a job on one PostgreSQL
orchestrator (6/2), then on two replicas sharing it (6/r/2: submits to one, workers on the
other), and their ratio; a smaller fleet than the medium size's, for a box too busy for it.

    .venv/bin/python -m bench.replicas_cpu [WORKERS [JOBS [PROFILE_DIR]]]   # 250, 1500

PostgreSQL on 127.0.0.1:5432 (`bench.scenarios.steps.PG_DEFAULT`); each half gets a fresh
database. The jobs are submitted for at most the medium size's 300 s: the CPU a job is over
those completed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path

from bench.scenarios.options import MEDIUM, Options
from bench.scenarios.side_by_side import compare_replicas
from bench.scenarios.steps import PG_DEFAULT
from bench.scenarios.throughput import throughput


async def main(workers: int, jobs: int, profile: Path | None) -> None:
    size = dataclasses.replace(
        MEDIUM, s2_workers=workers, s2_jobs=jobs, floor_seconds=2.0, floor_processes=1
    )
    results = []
    for replicas, name in ((1, "6/2"), (2, "6/r/2")):
        opts = Options(size, PG_DEFAULT, profile_dir=profile, replicas=replicas, paced=True)
        result = await throughput(opts)
        result.scenario = name
        results.append(result)
    compare_replicas(results)
    one, two = (r.metrics for r in results)
    print(
        f"6/2 {one['server_cpu_per_job_ms']} ms a job ({one['completed']} jobs), "
        f"6/r/2 {two['server_cpu_per_job_ms']} ms ({two['completed']} jobs): "
        f"ratio {two.get('cpu_per_job_vs_one_replica')}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(
        main(
            int(args[0]) if args else 250,
            int(args[1]) if len(args) > 1 else 1500,
            Path(args[2]) if len(args) > 2 else None,
        )
    )
