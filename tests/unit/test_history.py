"""Which progress reports become chart points, and which points a series keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.history import (
    CAPACITY,
    MAX_NAME,
    MAX_SERIES,
    Pace,
    admitted,
    kept,
    pace,
    sample_of,
    stride,
    thinning,
)


def replay(received: int, capacity: int) -> set[int]:
    """The ordinals left after storing `received` points one by one, thinning each time."""
    stored: set[int] = set()
    for ordinal in range(received):
        stored.add(ordinal)
        plan = thinning(ordinal, capacity)
        if plan is not None:
            stored -= {o for o in range(plan.start, plan.stop) if o in stored and o % plan.stride}
    return stored


@given(st.integers(3, 40), st.integers(1, 3000))
def test_thinning_point_by_point_keeps_exactly_the_evenly_spaced_points(
    capacity: int, received: int
) -> None:
    assert replay(received, capacity) == set(kept(received - 1, capacity))


@given(st.integers(3, 40), st.lists(st.integers(1, 300), min_size=1, max_size=20))
def test_thinning_a_batch_at_a_time_keeps_what_one_by_one_would(
    capacity: int, batches: list[int]
) -> None:
    stored: set[int] = set()
    received = 0
    for size in batches:  # a report carries every point the job wrote since the last one
        first, received = received, received + size
        stored |= set(range(first, received))
        plan = thinning(received - 1, capacity, first=first)
        if plan is not None:
            stored -= {o for o in range(plan.start, plan.stop) if o in stored and o % plan.stride}
        assert stored == set(kept(received - 1, capacity))


@given(st.integers(3, 1000), st.integers(0, 10**9))
def test_a_series_keeps_at_most_its_capacity_with_the_first_and_latest_points(
    capacity: int, ordinal: int
) -> None:
    points = kept(ordinal, capacity)
    assert len(points) <= capacity
    assert points[0] == 0
    assert points[-1] == ordinal


@given(st.integers(3, 1000), st.integers(0, 10**9))
def test_kept_points_are_evenly_spaced_and_never_thinner_than_needed(
    capacity: int, ordinal: int
) -> None:
    s = stride(ordinal, capacity)
    points = kept(ordinal, capacity)
    gaps = {b - a for a, b in pairwise(points[:-1])}
    assert gaps <= {s}
    # Half the stride would have kept too many: the spacing is as fine as the capacity allows.
    assert s == 1 or ordinal // (s // 2) > capacity - 2


def test_a_million_reports_keep_the_default_capacity_of_points() -> None:
    points = kept(999_999)
    assert len(points) <= CAPACITY
    assert len(points) > CAPACITY // 2  # a stride doubling halves it, never worse
    assert points[-1] == 999_999


def test_a_capacity_below_three_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        stride(10, 2)


def test_a_report_gives_its_step_total_and_numeric_metrics() -> None:
    sample = sample_of(
        {"step": 10, "total": 100, "metrics": {"loss": 0.42, "lr": 1e-4, "epoch": 1}}
    )
    assert sample is not None
    assert (sample.step, sample.total) == (10, 100)
    assert sample.values == {"loss": 0.42, "lr": 1e-4, "epoch": 1.0}


def test_metrics_at_the_top_level_count_too() -> None:
    sample = sample_of({"step": 3, "loss": 1.5})
    assert sample is not None
    assert sample.values == {"loss": 1.5}
    assert sample.total is None


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), 1e301, -1e308, "0.5", None, True, [1], {"a": 1}],
)
def test_values_that_cannot_be_charted_are_skipped(value: object) -> None:
    sample = sample_of({"step": 1, "metrics": {"bad": value, "loss": 2.0}})
    assert sample is not None
    assert sample.values == {"loss": 2.0}


def test_names_that_are_empty_too_long_or_not_text_are_skipped() -> None:
    metrics = {"": 1.0, "x" * (MAX_NAME + 1): 1.0, "x" * MAX_NAME: 2.0}
    sample = sample_of({"step": 1, "metrics": metrics})
    assert sample is not None
    assert sample.values == {"x" * MAX_NAME: 2.0}


@pytest.mark.parametrize("step", [None, "10", -1, 1.5, float("nan"), 2**60, True])
def test_a_report_without_a_usable_step_gives_no_points(step: object) -> None:
    assert sample_of({"step": step, "metrics": {"loss": 1.0}}) is None


def test_a_whole_float_step_is_a_step_and_a_bad_total_is_none() -> None:
    sample = sample_of({"step": 10.0, "total": "lots"})
    assert sample is not None
    assert (sample.step, sample.total) == (10, None)


NAMES = st.lists(st.sampled_from([f"m{i}" for i in range(60)]), unique=True, max_size=50)


@given(NAMES, NAMES)
def test_a_job_never_has_more_series_than_the_limit(known: list[str], names: list[str]) -> None:
    known = known[:MAX_SERIES]
    chosen = admitted(names, known)
    assert len(set(known) | set(chosen)) <= MAX_SERIES
    assert set(chosen) >= set(names) & set(known)  # a series already charted stays charted
    assert set(chosen) <= set(names)


T0 = datetime(2026, 11, 23, tzinfo=UTC)


def at(seconds: float, step: int) -> tuple[datetime, int]:
    return T0 + timedelta(seconds=seconds), step


def test_rate_and_eta_come_from_the_latest_points() -> None:
    points = [at(0, 0), *(at(100 + s, 10 * s) for s in range(20))]  # 10 steps a second
    result = pace(points, total=390)
    assert result.rate == pytest.approx(10.0)
    assert result.eta_s == pytest.approx(20.0)


def test_no_rate_from_one_point_a_standstill_or_steps_going_back() -> None:
    assert pace([at(0, 5)], 10) == Pace(None, None)
    assert pace([at(0, 5), at(1, 5)], 10) == Pace(None, None)
    assert pace([at(0, 5), at(1, 3)], 10) == Pace(None, None)
    assert pace([at(1, 5), at(1, 9)], 10) == Pace(None, None)


def test_no_eta_without_a_total_and_none_left_past_it() -> None:
    assert pace([at(0, 0), at(2, 4)], None) == Pace(2.0, None)
    assert pace([at(0, 0), at(2, 14)], 10) == Pace(7.0, 0.0)
