"""The fleet over time: the `fleet-history` loop's step (leader only), which samples every
label group, rolls the samples up into quarters and deletes what is past keeping; the range
a reader asks for; and the read-only fleet every signed-in key sees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.fleet_history import (
    MAX_POINTS,
    QUARTERS,
    SAMPLES,
    TIERS,
    FleetSample,
    Tier,
    bucket_start,
    check_group,
    choose_groups,
    expired_before,
    groups_of,
    job_groups,
    measure,
    parse_range,
    rollup,
    tier_for,
)
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import FLEET_TOPIC

Waits = Mapping[str, list[float]]


@dataclass(frozen=True, slots=True)
class FleetHistory:
    span: timedelta
    tier: Tier
    group: str
    groups: list[str]  # the groups sampled in the span, the whole fleet ("") first
    samples: list[FleetSample]


async def sample(ctx: Context) -> list[FleetSample]:
    """Sample each group now, roll the quarter(s) since the last sample up again, and prune
    each tier to what it keeps. Returns the samples written."""
    async with transaction(ctx) as tx:
        now = tx.now
        previous = await tx.q.latest_fleet_samples()
        every = timedelta(seconds=ctx.settings.fleet_sample_interval)
        since = previous[0].at if previous else now - every
        since = max(since, expired_before(SAMPLES, now))  # after a long stop: a day at most
        kinds = await tx.q.worker_census()
        loads = await tx.q.online_gpu_loads()
        waits = await _waits(tx, since, now)
        depth = await _queue_depths(tx)
        samples = [
            measure(
                g,
                now,
                [k for k in kinds if g in groups_of(k.labels)],
                [load for load in loads if g in groups_of(load.labels)],
                depth[g],
                waits[g],
            )
            for g in choose_groups(kinds)
        ]
        await tx.q.add_fleet_samples(samples)
        quarters = {bucket_start(at, QUARTERS.resolution_s) for at in (since, now)}
        for quarter in sorted(quarters):  # the one before too, when this sample began one
            await _roll_up(tx, quarter, now)
        for tier in TIERS:
            await tx.q.prune_fleet_samples(tier.resolution_s, expired_before(tier, now))
        tx.wake(FLEET_TOPIC)
    return samples


async def _waits(tx: Tx, since: datetime, until: datetime) -> Waits:
    """The waits, submit to first start, of the jobs that started in (since, until], by the
    groups of the worker each started on."""
    starts = await tx.q.first_starts(since, until)
    labels = await tx.q.worker_labels({worker_id for _, _, worker_id in starts})
    waits: dict[str, list[float]] = defaultdict(list)
    for submitted, started, worker_id in starts:
        waited = max(0.0, (started - submitted).total_seconds())
        for group in groups_of(labels.get(worker_id, {})):
            waits[group].append(waited)
    return waits


async def _queue_depths(tx: Tx) -> Mapping[str, int]:
    depth: dict[str, int] = defaultdict(int)
    for key, n in await tx.q.queued_by_match_key():
        for group in job_groups(key):
            depth[group] += n
    return depth


async def _roll_up(tx: Tx, quarter: datetime, now: datetime) -> None:
    """A quarter's rows, from its samples so far and the jobs that started in it (its end
    included, its start not: the quarter before holds a start at its end)."""
    end = quarter + timedelta(seconds=QUARTERS.resolution_s)
    by_group: dict[str, list[FleetSample]] = defaultdict(list)
    for s in await tx.q.fleet_samples_since(SAMPLES.resolution_s, quarter):
        if s.at < end:
            by_group[s.group].append(s)
    waits = await _waits(tx, quarter, min(end, now))
    rolled = [rollup(samples, waits[g], QUARTERS) for g, samples in by_group.items()]
    await tx.q.replace_fleet_samples(QUARTERS.resolution_s, quarter, rolled)


async def history(ctx: Context, range_text: str | None, group: str | None) -> FleetHistory:
    """One group's samples over the range asked (validated: a clear 422 otherwise)."""
    span = parse_range(range_text)
    wanted = check_group(group)
    tier = tier_for(span)
    since = ctx.clock() - span
    async with ctx.store.read() as q:
        samples = await q.fleet_series(tier.resolution_s, wanted, since, MAX_POINTS)
        groups = await q.fleet_groups(SAMPLES.resolution_s, since)
    return FleetHistory(span, tier, wanted, groups, samples)
