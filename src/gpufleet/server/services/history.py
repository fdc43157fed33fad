"""A job's progress history: appended with each progress report, read for the charts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.domain import history as rules
from gpufleet.domain.history import (
    STEP_SERIES,
    Pace,
    Thinning,
    admitted,
    pace,
    sample_of,
    thinning,
)
from gpufleet.domain.records import Attempt, Job
from gpufleet.domain.states import JobStatus
from gpufleet.errors import NotFound
from gpufleet.server.context import Context, Tx

FIRST = "loss"  # charted first: what an operator looks at first


async def record(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    progress: dict[str, Any] | None,
    earlier: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Append a report's points (the progress lines `earlier` than its `progress`, then its
    progress) in the transaction that records it as the job's progress; a repeat of the
    job's last report (a retried send, or the final status carrying it again) adds none."""
    if progress is None or progress == job.progress:
        return
    samples = [s for s in map(sample_of, [*earlier, progress]) if s is not None]
    if not samples:
        return
    counts = await tx.q.progress_counts(job.id)
    offered = list(dict.fromkeys(name for s in samples for name in s.values))
    names = admitted(offered, [n for n in counts if n != STEP_SERIES])
    received = {name: counts.get(name, 0) for name in [STEP_SERIES, *names]}
    before = dict(received)
    points = []
    for sample in samples:
        values = {STEP_SERIES: float(sample.step)}
        values |= {n: sample.values[n] for n in names if n in sample.values}
        for name, value in values.items():
            points.append(
                {
                    "job_id": job.id,
                    "series": name,
                    "ordinal": received[name],
                    "attempt": attempt.number,
                    "step": sample.step,
                    "value": value,
                    "ts": tx.now,
                }
            )
            received[name] += 1
    sent = {name: n - before[name] for name, n in received.items() if n > before[name]}
    await tx.q.add_progress(job.id, {n: before[n] for n in sent}, sent, points)
    plans: dict[Thinning, list[str]] = {}
    for name, added in sent.items():
        plan = thinning(before[name] + added - 1, rules.CAPACITY, first=before[name])
        if plan is not None:
            plans.setdefault(plan, []).append(name)
    for plan, series in plans.items():  # series sent equally often share one statement
        await tx.q.thin_progress(job.id, series, plan)


@dataclass(frozen=True, slots=True)
class History:
    job: Job
    step: int | None
    total: int | None
    pace: Pace
    capacity: int
    updated_at: datetime | None  # when the latest point was recorded
    series: dict[str, list[tuple[int, float, int]]]  # name → [(step, value, attempt)]


async def read(ctx: Context, job_id: str) -> History:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}; list jobs with GET /api/queue")
        values = await q.progress_values(job_id)
        steps = await q.progress_steps(job_id)
    now = sample_of(job.progress) if job.progress else None
    speed = Pace(None, None)
    if steps:
        last = steps[-1][2]
        total = now.total if now else None
        speed = pace([(ts, step) for ts, step, attempt in steps if attempt == last], total)
        if job.status is not JobStatus.RUNNING:
            speed = Pace(speed.rate, None)
    series: dict[str, list[tuple[int, float, int]]] = {}
    for name, step, value, attempt in values:
        series.setdefault(name, []).append((step, value, attempt))
    ordered = sorted(series, key=lambda name: (name != FIRST, name))
    return History(
        job=job,
        step=now.step if now else None,
        total=now.total if now else None,
        pace=speed,
        capacity=rules.CAPACITY,
        updated_at=steps[-1][0] if steps else None,
        series={name: series[name] for name in ordered},
    )
