"""The fleet over time's rules (domain/fleet_history.py): percentiles, groups, roll-ups, and
the ranges a reader may ask for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.fleet_history import (
    MAX_GROUPS,
    QUARTERS,
    SAMPLES,
    FleetSample,
    bucket_start,
    check_group,
    job_groups,
    parse_range,
    percentile,
    rollup,
    tier_for,
)
from gpufleet.domain.matching import match_key
from gpufleet.errors import InvalidInput

waits = st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=50)


@given(waits, st.floats(0, 100), st.floats(0, 100))
def test_a_percentile_lies_within_the_waits_and_grows_with_q(
    values: list[float], q1: float, q2: float
) -> None:
    low, high = sorted((q1, q2))
    p_low, p_high = percentile(values, low), percentile(values, high)
    assert p_low is not None and p_high is not None
    assert min(values) <= p_low <= p_high <= max(values) + 1e-6


def test_percentiles_interpolate_between_ranks_and_none_has_none() -> None:
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert percentile([1.0] * 9 + [100.0], 90) == pytest.approx(10.9)
    assert percentile([], 50) is None


@pytest.mark.parametrize(
    ("text", "span"),
    [
        (None, timedelta(hours=1)),
        ("hour", timedelta(hours=1)),
        ("DAY", timedelta(days=1)),
        ("week", timedelta(days=7)),
        ("30m", timedelta(minutes=30)),
        ("6h", timedelta(hours=6)),
        ("7d", timedelta(days=7)),
    ],
)
def test_a_range_is_named_or_a_span_up_to_a_week(text: str | None, span: timedelta) -> None:
    assert parse_range(text) == span


@pytest.mark.parametrize("text", ["8d", "169h", "0h", "1.5h", "h", "1w", "1e9d", "9" * 30 + "m"])
def test_a_range_past_a_week_or_not_a_span_is_refused_saying_what_is(text: str) -> None:
    with pytest.raises(InvalidInput, match="range is hour, day, week"):
        parse_range(text)


def test_a_day_is_drawn_from_samples_and_longer_ranges_from_quarters() -> None:
    assert tier_for(timedelta(hours=1)) is SAMPLES
    assert tier_for(timedelta(days=1)) is SAMPLES
    assert tier_for(timedelta(days=1, minutes=1)) is QUARTERS


def test_a_queued_job_waits_in_the_groups_of_the_exact_labels_it_asks() -> None:
    assert job_groups(match_key({})) == [""]
    assert job_groups(match_key({"gpu": "a100", "zone": "b"})) == ["", "gpu=a100", "zone=b"]
    assert job_groups(match_key({"gpu": "a100*"})) == [""]  # a glob: no one pair
    assert job_groups(None) == [""]


def test_a_group_is_empty_or_key_value_and_short() -> None:
    assert check_group(" gpu=a100 ") == "gpu=a100" and check_group(None) == ""
    for bad in ("a100", "k=" + "v" * 300):
        with pytest.raises(InvalidInput):
            check_group(bad)
    assert MAX_GROUPS == 16


def _sample(at: datetime, busy: float, util: float | None) -> FleetSample:
    return FleetSample("", at, 0, busy, 1 - busy, 0, 1, busy, util, 2 * busy, 0, None, None)


def test_a_quarter_is_the_mean_of_its_samples_and_the_percentiles_of_its_waits() -> None:
    start = datetime(2026, 1, 1, 10, 15, tzinfo=UTC)
    samples = [
        _sample(start + timedelta(minutes=1), 1, 80.0),
        _sample(start + timedelta(minutes=2), 0, None),
        _sample(start + timedelta(minutes=3), 0, 20.0),
    ]

    quarter = rollup(samples, [10.0, 20.0, 30.0], QUARTERS)

    assert quarter.at == start and quarter.resolution_s == 900
    assert quarter.workers_busy == pytest.approx(1 / 3)
    assert quarter.queue_depth == pytest.approx(2 / 3)
    assert quarter.gpu_util_pct == 50.0  # of the samples that had a load
    assert (quarter.jobs_started, quarter.wait_p50_s, quarter.wait_p90_s) == (3, 20.0, 28.0)


def test_a_bucket_starts_on_the_quarter_hour() -> None:
    at = datetime(2026, 1, 1, 10, 29, 59, 500, tzinfo=UTC)
    assert bucket_start(at, 900) == datetime(2026, 1, 1, 10, 15, tzinfo=UTC)


def test_a_sample_counts_kinds_of_workers_as_the_workers_they_stand_for() -> None:
    """The store counts workers by kind (a fleet at rest is a few): a kind of 3 counts as 3
    workers, its GPUs three times; an offline kind's GPUs are not the fleet's."""
    from gpufleet.domain.fleet_history import GpuLoads, WorkerKind, choose_groups, measure
    from gpufleet.domain.states import WorkerStatus

    at = datetime(2026, 1, 1, tzinfo=UTC)
    kinds = [
        WorkerKind(WorkerStatus.IDLE, {"gpu": "a100"}, 8, False, 3),
        WorkerKind(WorkerStatus.BUSY, {"gpu": "h100"}, 4, False, 2),
        WorkerKind(WorkerStatus.OFFLINE, {"gpu": "h100"}, 4, True, 5),
    ]
    loads = [GpuLoads({"gpu": "h100"}, [50.0, 100.0]), GpuLoads({"gpu": "a100"}, [0.0])]

    sample = measure("", at, kinds, loads, 7, [])

    assert (sample.workers_idle, sample.workers_busy, sample.workers_unavailable) == (3, 2, 5)
    assert (sample.gpus, sample.gpus_busy) == (32, 8)
    assert sample.gpu_util_pct == 50.0
    assert sample.queue_depth == 7
    assert choose_groups(kinds) == ["", "gpu=h100", "gpu=a100"]  # 7 workers against 3
