"""The bounds of domain/bounds.py, and the worker's relay keeping a job's progress under its
own: a chatty trainer's progress is trimmed, never refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import bounds
from gpufleet.worker.relay import ProgressTail

KIB = 1024


def test_progress_is_measured_as_its_compact_utf8_json() -> None:
    progress = {"step": 1, "metrics": {"loss": 0.5, "name": "é"}}
    compact = json.dumps(progress, separators=(",", ":"), ensure_ascii=False).encode()

    assert bounds.json_size(progress) == len(compact)
    assert bounds.json_size({"big": 2**70, "nan": float("nan")}) == len(
        b'{"big":"1180591620717411303424","nan":null}'
    )


def test_progress_up_to_16_kib_is_taken_and_over_it_refused_naming_the_limit() -> None:
    fits = {"note": "x" * (16 * KIB - len('{"note":""}'))}
    over = {"note": "x" * (16 * KIB)}

    assert bounds.progress_problem(fits) is None
    assert bounds.progress_problem(None) is None
    problem = bounds.progress_problem(over)
    assert problem is not None and "16384 bytes" in problem


def test_a_list_shows_only_step_and_total_and_null_for_what_is_not_a_number() -> None:
    assert bounds.progress_summary({"step": 5, "total": 10, "metrics": {"x": 1}}) == {
        "step": 5,
        "total": 10,
    }
    assert bounds.progress_summary({"step": "x" * 9000, "total": True}) == {
        "step": None,
        "total": None,
    }
    assert bounds.progress_summary(None) is None


def test_trimming_keeps_a_progress_that_fits_as_it_is() -> None:
    progress = {"step": 3, "total": 9, "metrics": {"loss": 0.1}, "extra": [1, 2]}
    assert bounds.trim_progress(progress) == progress


def test_trimming_keeps_step_total_and_the_numeric_metrics_in_order() -> None:
    metrics: dict[str, Any] = {"loss": 0.25, "samples": ["x" * 100] * 400, "lr": 3e-4}
    metrics |= {f"layer_{i}_norm": float(i) for i in range(3000)}
    progress = {"step": 120, "total": 1000, "metrics": metrics, "blob": "y" * 50_000}

    trimmed = bounds.trim_progress(progress)

    assert bounds.progress_problem(trimmed) is None
    assert (trimmed["step"], trimmed["total"], trimmed["trimmed"]) == (120, 1000, True)
    kept = list(trimmed["metrics"])
    assert kept[:3] == ["loss", "lr", "layer_0_norm"]
    assert "samples" not in kept and "blob" not in trimmed
    assert 300 < len(kept) < 3002  # as many as fit, in order, then none
    numeric = [name for name, value in metrics.items() if isinstance(value, float)]
    assert kept == numeric[: len(kept)]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3000),
        lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(), inner, max_size=8),
        max_leaves=60,
    )
)
def test_whatever_a_trainer_writes_the_trimmed_progress_fits(value: Any) -> None:
    for progress in ({"step": value, "total": value, "metrics": value}, {"metrics": {"m": value}}):
        assert bounds.progress_problem(bounds.trim_progress(progress)) is None


def test_a_log_batch_over_1_mib_of_text_is_refused_naming_the_limit() -> None:
    assert bounds.log_batch_problem(["é" * (512 * KIB)]) is None  # 1 MiB of UTF-8
    problem = bounds.log_batch_problem(["é" * (512 * KIB), "x"])
    assert problem is not None and "1048576 bytes" in problem


def test_the_relay_trims_a_chatty_trainers_progress_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "progress.jsonl"
    tail = ProgressTail(path)
    chatty = {"step": 7, "total": 70, "metrics": {"loss": 0.5, "text": "z" * 40_000}}
    with path.open("w") as file:
        for step in (7, 8):
            file.write(json.dumps({**chatty, "step": step}) + "\n")

    relayed = tail.poll()

    assert relayed == {"step": 8, "total": 70, "metrics": {"loss": 0.5}, "trimmed": True}
    assert tail.trimmed == 2
    warnings = [r for r in caplog.records if "over 16384 bytes" in r.getMessage()]
    assert len(warnings) == 1

    with path.open("a") as file:
        file.write(json.dumps({"step": 9, "total": 70, "metrics": {"loss": 0.4}}) + "\n")
    assert tail.poll() == {"step": 9, "total": 70, "metrics": {"loss": 0.4}}


def test_the_relay_keeps_every_progress_line_until_a_report_takes_them(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = ProgressTail(path)
    with path.open("w") as file:
        for step in range(5):
            file.write(json.dumps({"step": step, "metrics": {"loss": 1 / (step + 1)}}) + "\n")
            file.write(json.dumps({"checkpoint": f"out/c{step}", "step": step}) + "\n")
    tail.poll()
    tail.poll()  # another look (the checkpoint shipper's) loses none

    taken = tail.take_points()

    assert [p["step"] for p in taken] == [0, 1, 2, 3, 4]
    assert tail.take_points() == []


@given(st.integers(0, 1000), st.integers(0, 40_000))
def test_a_reports_points_are_thinned_evenly_to_fit_with_the_first_and_last_kept(
    count: int, padding: int
) -> None:
    points = [{"step": i, "metrics": {"loss": 0.5, "x": "z" * padding}} for i in range(count)]

    fitted = bounds.fit_points(points)

    assert bounds.points_problem(fitted) is None
    if count:
        assert fitted[0] == points[0] and fitted[-1] == points[-1]
    steps = [p["step"] for p in fitted]
    assert steps == sorted(set(steps))
    if bounds.points_problem(points) is None:
        assert fitted == points


def test_a_report_over_200_points_or_512_kib_of_them_is_refused_naming_the_limit() -> None:
    assert bounds.points_problem([{"step": 1}] * 200) is None
    many = bounds.points_problem([{"step": 1}] * 201)
    assert many is not None and "limit of 200" in many
    big = bounds.points_problem([{"step": 1, "x": "z" * (256 * KIB)}] * 2)
    assert big is not None and "524288 bytes" in big
