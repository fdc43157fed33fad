"""The pools' decision (`domain/capacity.py`, #36) on a deep queue: its CPU time, in process.

    .venv/bin/python -m bench.capacity            # 60 runs of each fleet: median and min

1,000 waiting jobs (a tenth of them multi-node, two or four nodes with one `gpu` value) over
20 pools of 1 to 8 GPUs, with 200 workers of those pools (half idle, half busy) and 2,300
launches: 5 in flight, 10 registered and 100 ended (two thirds of them failed, two hours
ago) a pool. `typical`: the jobs ask 24 label sets; `distinct`: half of them ask a label set
of their own as well (the labels are matched once per set asked). The goal (#36): at most
50 ms. CPU time (`time.process_time`), so that a busy box shows the decision's own cost.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from gpufleet.domain.capacity import FleetWorker, WaitingJob, decide
from gpufleet.domain.jobspec import GangShape
from gpufleet.domain.matching import AGENT_FEATURES, Capacity, Feature, Requirement
from gpufleet.domain.pools import Launch, LaunchState, LocalProvider, Pool
from gpufleet.domain.states import Target, WorkerStatus, WorkerType

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = 60
Fleet = tuple[list[Pool], list[WaitingJob], list[FleetWorker], list[Launch]]


def _pool(i: int) -> Pool:
    labels = {"pool": f"p{i % 10}", "gpu": ["a100", "h100"][i % 2]}
    return Pool(
        f"id{i}", f"p{i}", LocalProvider(), labels, [1, 2, 4, 8][i % 4], None,
        WorkerType.EPHEMERAL, i % 3, 50, 300, 600, 1 + i / 10, None, True, NOW, None, NOW,
    )  # fmt: skip


def _launch(
    p: Pool,
    n: int,
    state: LaunchState,
    *,
    worker_id: str | None = None,
    registered_at: datetime | None = None,
    ended_at: datetime | None = None,
    error: str | None = None,
) -> Launch:
    made = NOW if ended_at is None else ended_at
    return Launch(
        f"l{p.id}-{n}", p.id, state, None, worker_id, made, registered_at, ended_at, None, error
    )


def fleet(distinct: bool, seed: int = 1) -> Fleet:
    rnd = random.Random(seed)
    pools = [_pool(i) for i in range(20)]
    launches: list[Launch] = []
    workers: list[FleetWorker] = []
    for p in pools:
        launches += [_launch(p, n, LaunchState.LAUNCHING) for n in range(5)]
        for n in range(5, 15):
            wid = f"w-{p.name}-{n}"
            launches.append(_launch(p, n, LaunchState.REGISTERED, worker_id=wid, registered_at=NOW))
            status = rnd.choice([WorkerStatus.IDLE, WorkerStatus.BUSY])
            every = frozenset(AGENT_FEATURES)
            cap = Capacity(wid, wid, status, p.gpu_count, p.labels, False, features=every)
            workers.append(FleetWorker(cap, p.id, NOW))
        past = NOW - timedelta(hours=2)
        for n in range(15, 115):
            if n % 3:
                launches.append(_launch(p, n, LaunchState.FAILED, ended_at=past, error="exit 1"))
            else:
                ok = _launch(p, n, LaunchState.TERMINATED, ended_at=past, registered_at=past)
                launches.append(ok)
    jobs = []
    for i in range(1000):
        labels = {"pool": f"p{rnd.randrange(12)}", "gpu": rnd.choice(["a100", "h100"])}
        if distinct and i % 2:
            labels["team"] = f"t{i}"
        nodes = rnd.choice([1] * 9 + [2, 4])
        gpus = rnd.choice([1, 2, 4, 8])
        req = Requirement(Target.AUTO, gpus, labels, frozenset({Feature.COMMAND}))
        jobs.append(WaitingJob(f"j{i}", req, GangShape(nodes, gpus, "gpu" if nodes > 1 else None)))
    return pools, jobs, workers, launches


def measure(scene: Fleet, runs: int = RUNS) -> list[float]:
    pools, jobs, workers, launches = scene
    times = []
    for _ in range(runs):
        start = time.process_time()
        decide(pools, jobs, workers, launches, NOW + timedelta(hours=1))
        times.append((time.process_time() - start) * 1000)
    return times


def main() -> None:
    for name, distinct in (("typical", False), ("distinct", True)):
        times = measure(fleet(distinct))
        print(f"{name}: median {statistics.median(times):.1f} ms, min {min(times):.1f} ms (CPU)")


if __name__ == "__main__":
    main()
