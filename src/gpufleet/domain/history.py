"""A job's progress history: which reports become chart points, and which points are kept.

A job may report progress a million times; its history stays small. Each series (one metric
of one job, and the job's step count, `STEP_SERIES`) keeps at most `CAPACITY` points: every
`stride`-th point it was sent, and always the latest. The stride doubles each time the series
outgrows its capacity, so the kept points stay spread evenly over the whole run, and a job
costs at most `CAPACITY` * (`MAX_SERIES` + 1) rows, however long it runs.

Point `ordinal` (0, 1, 2, …: its place in its series) is dropped once the stride no longer
divides it and a newer point exists; since the stride only grows (by doubling), a point once
dropped would never be kept again, so storing the rule's state is storing the kept points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

CAPACITY = 500  # points kept per series
MAX_SERIES = 32  # metric series per job; names beyond these are not charted
MAX_NAME = 64  # characters in a metric name
MAX_STEP = 2**53  # steps stay exact as JavaScript numbers
# Beyond this a value is skipped: differences of two kept values stay finite for the chart.
MAX_MAGNITUDE = 1e300
STEP_SERIES = ""  # the report's own step (for rate and ETA); a metric name is never empty
RATE_WINDOW = 10  # kept step points the rate is averaged over


@dataclass(frozen=True, slots=True)
class Sample:
    """What one progress report adds to the history."""

    step: int
    total: int | None
    values: dict[str, float]  # metric name → finite value


def _count(value: Any) -> int | None:
    """A step or total: a whole, non-negative number within `MAX_STEP`, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= MAX_STEP else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_MAGNITUDE else None


def sample_of(progress: Mapping[str, Any]) -> Sample | None:
    """The chart points in a report (`{"step", "total", "metrics": {…}}`, the metrics also
    accepted at the top level): None without a usable step; NaN, huge, non-numeric values
    and over-long names are skipped."""
    step = _count(progress.get("step"))
    if step is None:
        return None
    metrics = progress.get("metrics")
    named = {k: v for k, v in progress.items() if k not in ("step", "total", "metrics")}
    if isinstance(metrics, Mapping):
        named.update(metrics)
    values = {}
    for name, raw in named.items():
        number = _number(raw)
        if isinstance(name, str) and 0 < len(name) <= MAX_NAME and number is not None:
            values[name] = number
    return Sample(step=step, total=_count(progress.get("total")), values=values)


def admitted(names: Sequence[str], known: Sequence[str], limit: int = MAX_SERIES) -> list[str]:
    """The metric names charted: those with a series already, then new ones (in name
    order) while the job has fewer than `limit` series."""
    room = max(0, limit - len(known))
    old = set(known)
    new = sorted(name for name in set(names) if name not in old)
    return [name for name in names if name in old] + new[:room]


def stride(ordinal: int, capacity: int = CAPACITY) -> int:
    """The stride once points 0…`ordinal` of a series were received: the smallest power of
    two leaving at most `capacity` - 1 multiples (the latest point takes the last place)."""
    if capacity < 3:
        raise ValueError("a series keeps at least 3 points")
    s = 1
    while ordinal // s > capacity - 2:
        s *= 2
    return s


def kept(ordinal: int, capacity: int = CAPACITY) -> list[int]:
    """The ordinals a series keeps once points 0…`ordinal` were received."""
    s = stride(ordinal, capacity)
    return sorted({*range(0, ordinal + 1, s), ordinal})


@dataclass(frozen=True, slots=True)
class Thinning:
    """Drop the points with ordinals in [start, stop) that `stride` does not divide."""

    stride: int
    start: int
    stop: int


def thinning(ordinal: int, capacity: int = CAPACITY, first: int | None = None) -> Thinning | None:
    """What to drop once points `first`…`ordinal` (one point when `first` is None) are stored
    beside the points kept before them: the point before them (it was kept only as the
    latest) and the new ones the stride does not divide, or, when the stride has grown,
    every point the new stride does not divide."""
    first = ordinal if first is None else first
    if not 0 <= first <= ordinal:
        raise ValueError(f"points {first} to {ordinal} are no batch")
    s = stride(ordinal, capacity)
    if first == 0 or s != stride(first - 1, capacity):
        return None if s == 1 else Thinning(s, 0, ordinal)
    if s == 1 or (first == ordinal and (ordinal - 1) % s == 0):
        return None
    return Thinning(s, first - 1, ordinal)


@dataclass(frozen=True, slots=True)
class Pace:
    rate: float | None  # steps a second
    eta_s: float | None  # seconds left at that rate


def pace(points: Sequence[tuple[datetime, int]], total: int | None) -> Pace:
    """Steps a second over the last `RATE_WINDOW` kept (time, step) points of one attempt,
    and the time left at that rate to `total`."""
    if len(points) < 2:
        return Pace(None, None)
    (t0, s0), (t1, s1) = points[max(0, len(points) - 1 - RATE_WINDOW)], points[-1]
    seconds = (t1 - t0).total_seconds()
    if seconds <= 0 or s1 <= s0:
        return Pace(None, None)
    rate = (s1 - s0) / seconds
    eta = None if total is None else max(0, total - s1) / rate
    return Pace(rate, eta)
