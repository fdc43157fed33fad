"""The fleet over time: what one sample of the fleet says, the label groups it is taken for,
how samples are rolled up into coarser ones and for how long each kind is kept, queue-wait
percentiles, and the ranges a reader may ask for (docs/ui.md, "Fleet").

Two tiers: a sample every `--fleet-sample-interval` (each kept a day), and one a quarter of an hour
(kept a week), rolled up from the samples inside it; nothing older is kept, so the history
is bounded by time, and by `MAX_GROUPS` in width.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.records import effective_labels
from gpufleet.domain.states import WorkerStatus
from gpufleet.errors import InvalidInput

WHOLE_FLEET = ""  # the group of every worker and every queued job
MAX_GROUPS = 16  # the whole fleet and the 15 label pairs most workers have
MAX_GROUP_CHARS = 200


@dataclass(frozen=True, slots=True)
class Tier:
    name: str  # "sample" or "quarter"
    resolution_s: int  # 0: one row a sample, at its own time
    kept: timedelta


SAMPLES = Tier("sample", 0, timedelta(days=1))
QUARTERS = Tier("quarter", 900, timedelta(days=7))
TIERS = (SAMPLES, QUARTERS)
LONGEST = QUARTERS.kept
MAX_POINTS = 1500  # the most rows one range answers (a day of samples a minute apart)


@dataclass(frozen=True, slots=True)
class FleetSample:
    """One group's state at `at`: counts and depths are means over a quarter's samples."""

    group: str
    at: datetime
    resolution_s: int
    workers_busy: float
    workers_idle: float
    workers_unavailable: float  # connecting, draining or offline
    gpus: float
    gpus_busy: float
    gpu_util_pct: float | None  # mean load of the GPUs that report it; None: none does
    queue_depth: float
    jobs_started: int  # jobs whose first start fell in this sample's span
    wait_p50_s: float | None  # their waits from submit to start; None: no job started
    wait_p90_s: float | None


@dataclass(frozen=True, slots=True)
class WorkerKind:
    """Workers alike in all a sample counts, and how many: the store counts them so (a fleet
    at rest is a few kinds), where reading 10,000 workers took a tenth of a second."""

    status: WorkerStatus
    labels: Mapping[str, str]
    gpu_count: int
    offline: bool
    count: int = 1


@dataclass(frozen=True, slots=True)
class GpuLoads:
    """An online worker's labels and the load of each of its GPUs that reports one."""

    labels: Mapping[str, str]
    utilization_pct: Sequence[float]


def worker_kind(
    status: str, reported: dict[str, str], admin: dict[str, str], gpus: int, off: bool, n: int
) -> WorkerKind:
    """A kind as the store counts it: the worker's own labels and the admin's."""
    return WorkerKind(WorkerStatus(status), effective_labels(reported, admin), gpus, off, n)


# ---- groups -----------------------------------------------------------------------------


def pair(key: str, value: str) -> str:
    return f"{key}={value}"


def groups_of(labels: Mapping[str, str]) -> list[str]:
    """The groups a worker with these labels counts in: the whole fleet, and each pair."""
    return [WHOLE_FLEET, *(pair(k, v) for k, v in sorted(labels.items()))]


def choose_groups(kinds: Iterable[WorkerKind]) -> list[str]:
    """The whole fleet, then the label pairs most workers have (ties by name), bounded."""
    counts: Counter[str] = Counter()
    for kind in kinds:
        for g in groups_of(kind.labels)[1:]:
            counts[g] += kind.count
    ranked = sorted(counts, key=lambda g: (-counts[g], g))
    return [WHOLE_FLEET, *ranked[: MAX_GROUPS - 1]]


def job_groups(match_key: str | None) -> list[str]:
    """The groups a queued job is waiting in: the whole fleet, and each label pair it asks
    for exactly (its `domain.matching.match_key`; a glob asks for no one pair)."""
    try:
        pairs = json.loads(match_key or "[]")
    except ValueError:
        return [WHOLE_FLEET]
    if not isinstance(pairs, list):
        return [WHOLE_FLEET]
    return [WHOLE_FLEET, *(pair(str(k), str(v)) for k, v in pairs)]


def check_group(group: str | None) -> str:
    """A group a reader names: empty (the whole fleet) or `key=value`."""
    group = (group or "").strip()
    if len(group) > MAX_GROUP_CHARS:
        raise InvalidInput(f"group is at most {MAX_GROUP_CHARS} characters: one key=value")
    if group and "=" not in group:
        raise InvalidInput("group is a worker label as key=value (e.g. gpu=a100), or empty")
    return group


# ---- one sample -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between ranks; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def measure(
    group: str,
    at: datetime,
    kinds: Sequence[WorkerKind],
    loads: Sequence[GpuLoads],
    queue_depth: int,
    waits: Sequence[float],
    resolution_s: int = 0,
) -> FleetSample:
    """One group's sample from the kinds of its workers, their GPUs' loads, its queued jobs
    and the waits of the jobs that started on its workers since the last sample."""
    busy = sum(k.count for k in kinds if k.status is WorkerStatus.BUSY)
    idle = sum(k.count for k in kinds if k.status is WorkerStatus.IDLE)
    pcts = [u for load in loads for u in load.utilization_pct]
    return FleetSample(
        group=group,
        at=at,
        resolution_s=resolution_s,
        workers_busy=busy,
        workers_idle=idle,
        workers_unavailable=sum(k.count for k in kinds) - busy - idle,
        gpus=sum(k.gpu_count * k.count for k in kinds if not k.offline),
        gpus_busy=sum(k.gpu_count * k.count for k in kinds if k.status is WorkerStatus.BUSY),
        gpu_util_pct=sum(pcts) / len(pcts) if pcts else None,
        queue_depth=queue_depth,
        jobs_started=len(waits),
        wait_p50_s=percentile(waits, 50),
        wait_p90_s=percentile(waits, 90),
    )


# ---- rolling up, keeping ----------------------------------------------------------------


def bucket_start(at: datetime, resolution_s: int) -> datetime:
    """The start of the bucket of `resolution_s` seconds that holds `at` (UTC-aligned)."""
    stamp = at.timestamp()
    return at - timedelta(seconds=stamp - math.floor(stamp / resolution_s) * resolution_s)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rollup(samples: Sequence[FleetSample], waits: Sequence[float], tier: Tier) -> FleetSample:
    """One quarter's row of a group from the samples inside it (gauges: their means) and the
    waits of every job that started in it (percentiles are not averaged: taken again)."""
    first = samples[0]
    loads = [s.gpu_util_pct for s in samples if s.gpu_util_pct is not None]
    return FleetSample(
        group=first.group,
        at=bucket_start(first.at, tier.resolution_s),
        resolution_s=tier.resolution_s,
        workers_busy=_mean([s.workers_busy for s in samples]),
        workers_idle=_mean([s.workers_idle for s in samples]),
        workers_unavailable=_mean([s.workers_unavailable for s in samples]),
        gpus=_mean([s.gpus for s in samples]),
        gpus_busy=_mean([s.gpus_busy for s in samples]),
        gpu_util_pct=_mean(loads) if loads else None,
        queue_depth=_mean([s.queue_depth for s in samples]),
        jobs_started=len(waits),
        wait_p50_s=percentile(waits, 50),
        wait_p90_s=percentile(waits, 90),
    )


def expired_before(tier: Tier, now: datetime) -> datetime:
    """Rows of this tier older than this are deleted."""
    return now - tier.kept


# ---- what a reader asks -----------------------------------------------------------------

NAMED_RANGES = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}
_UNITS = {"m": 60, "h": 3600, "d": 86400}
_RANGE = re.compile(r"([1-9][0-9]{0,5})([mhd])")
RANGE_RULE = "range is hour, day, week, or a span such as 30m, 6h or 3d, at most 7d"


def parse_range(text: str | None) -> timedelta:
    """The span a reader asks for: a named range or `<n>m|h|d`, from a minute to a week."""
    text = (text or "hour").strip().lower()
    if text in NAMED_RANGES:
        return NAMED_RANGES[text]
    found = _RANGE.fullmatch(text)
    if found is None:
        raise InvalidInput(f"{RANGE_RULE}; got {text[:40]!r}")
    span = timedelta(seconds=int(found[1]) * _UNITS[found[2]])
    if span > LONGEST:
        raise InvalidInput(f"{RANGE_RULE}: samples are kept a week; got {text!r}")
    return span


def tier_for(span: timedelta) -> Tier:
    """Up to a day, every sample (the newest `MAX_POINTS` of them); longer, quarter-hours."""
    return SAMPLES if span <= SAMPLES.kept else QUARTERS
