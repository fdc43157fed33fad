"""Sweeps' pure rules (domain/sweeps.py): the grid, sampling without repeats, placeholders
replaced and checked, the input refused; properties over generated sweeps (hypothesis)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import sweeps
from gpufleet.domain.states import JobStatus
from gpufleet.errors import InvalidInput

NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
SCALARS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.text(TEXT, max_size=8),
)


@st.composite
def grids(draw: st.DrawFn, most: int = 200) -> dict[str, list[Any]]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    out: dict[str, list[Any]] = {}
    for name in names:
        values = draw(st.lists(SCALARS, min_size=1, max_size=5, unique_by=json.dumps))
        out[name] = values
    if math.prod(len(v) for v in out.values()) > most:
        out = {n: v[:1] for n, v in out.items()}
    return out


def command_using(names: list[str]) -> dict[str, Any]:
    return {"command": ["python", "train.py", *(f"--{n}={{{n}}}" for n in names)]}


@given(grids())
def test_a_grid_runs_every_combination_once_each_from_its_lists(
    sweep: dict[str, list[Any]],
) -> None:
    planned = sweeps.plan(command_using(list(sweep)), sweep, None, random.Random(0))

    assert len(planned.points) == math.prod(len(v) for v in sweep.values())
    assert len({json.dumps(p) for p in planned.points}) == len(planned.points)
    for point in planned.points:
        assert list(point) == list(sweep)
        assert all(point[n] in sweep[n] or point[n] != point[n] for n in sweep)


@given(grids(), st.integers(1, 300), st.integers(0, 2**32))
def test_samples_are_distinct_points_of_the_grid_as_many_as_asked_or_all(
    sweep: dict[str, list[Any]], samples: int, seed: int
) -> None:
    grid = sweeps.check_grid(sweep, samples)
    every = [json.dumps(grid.point(i)) for i in range(grid.size)]

    points = sweeps.choose(grid, samples, random.Random(seed))

    drawn = [json.dumps(p) for p in points]
    assert len(drawn) == min(samples, grid.size)
    assert len(set(drawn)) == len(drawn)
    assert set(drawn) <= set(every)


@given(grids())
def test_each_jobs_config_holds_its_values_and_its_point_as_json(
    sweep: dict[str, list[Any]],
) -> None:
    config = {**command_using(list(sweep)), "env": {"A": "x"}}

    planned = sweeps.plan(config, sweep, None, random.Random(0))

    for point, body in zip(planned.points, planned.configs, strict=True):
        assert body["command"][2:] == [f"--{n}={sweeps.as_text(point[n])}" for n in sweep]
        assert json.loads(body["env"][sweeps.PARAMS_ENV]) == json.loads(json.dumps(point))
        assert body["env"]["A"] == "x"
        assert sweeps.params_of(body) == json.loads(json.dumps(point))


@settings(max_examples=50)
@given(grids(), st.text(TEXT, max_size=20))
def test_a_value_is_written_once_as_it_is_never_read_as_a_placeholder_again(
    sweep: dict[str, list[Any]], text: str
) -> None:
    name = next(iter(sweep))
    sweep = {name: [f"{{{name}}}{text}"]}
    planned = sweeps.plan(command_using([name]), sweep, None, random.Random(0))

    assert planned.configs[0]["command"][2] == f"--{name}={{{name}}}{text}"


def test_the_whole_placeholder_of_a_config_field_takes_the_value_itself() -> None:
    config = {
        "command": ["train", "--batch={batch}"],
        "env": {"LR": "{lr}"},
        "batch_size": "{batch}",
        "note": "lr {lr}, literal {{lr}}",
        "data": {"paths": ["/d/{batch}"], "json": "{'a': 1}"},
    }

    planned = sweeps.plan(config, {"lr": [1e-4], "batch": [16]}, None, random.Random(0))

    body = planned.configs[0]
    assert body["command"] == ["train", "--batch=16"]
    assert body["env"]["LR"] == "0.0001"  # env values stay strings
    assert body["batch_size"] == 16
    assert body["note"] == "lr 0.0001, literal {lr}"
    assert body["data"] == {"paths": ["/d/16"], "json": "{'a': 1}"}


@given(grids())
def test_a_points_index_is_its_place_in_the_grid(sweep: dict[str, list[Any]]) -> None:
    grid = sweeps.Grid.of(sweep)

    assert [grid.index_of(grid.point(i)) for i in range(grid.size)] == list(range(grid.size))
    assert grid.index_of({}) == grid.size


def test_the_grid_changes_its_last_parameter_fastest() -> None:
    grid = sweeps.check_grid({"lr": [1, 2], "batch": [16, 32, 64]})

    assert [grid.point(i) for i in range(4)] == [
        {"lr": 1, "batch": 16},
        {"lr": 1, "batch": 32},
        {"lr": 1, "batch": 64},
        {"lr": 2, "batch": 16},
    ]


REFUSED = [
    ({"lr": list(range(100)), "b": list(range(100)), "c": list(range(10))}, None, "100,000 points"),
    ({"lr": list(range(1001))}, None, "at most 1000"),
    ({"lr": []}, None, "non-empty list"),
    ({"lr": 0.1}, None, "non-empty list"),
    ({"lr": [[0.1]]}, None, "a list: a sweep's values are"),
    ({"lr": [{"a": 1}]}, None, "a dict"),
    ({"lr": [None]}, None, "a NoneType"),
    ({"lr": [float("nan")]}, None, "finite"),
    ({"lr": ["a\x00b"]}, None, "NUL"),
    ({"lr": ["\ud800"]}, None, "lone surrogate"),
    ({"lr": ["x" * 2000]}, None, "1024 characters"),
    ({"lr": [1, 1]}, None, "twice"),
    ({"9lr": [1]}, None, "not a name"),
    ({"l r": [1]}, None, "not a name"),
    ({"": [1]}, None, "not a name"),
    ({}, None, "an object of parameters"),
    ([1, 2], None, "an object of parameters"),
    ({f"p{i}": [1] for i in range(17)}, None, "at most 16"),
    ({"lr": list(range(1000)), "b": list(range(1000)), "c": [1, 2]}, 5, "to draw from"),
]


@pytest.mark.parametrize(("sweep", "samples", "said"), REFUSED)
def test_a_sweep_that_cannot_run_is_refused_saying_why(
    sweep: Any, samples: int | None, said: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        sweeps.check_grid(sweep, samples)
    assert said in caught.value.message, caught.value.message


def test_a_placeholder_that_names_no_parameter_is_refused_naming_it_and_where() -> None:
    config = {"command": ["python", "train.py", "--lr", "{lrr}", "--b", "{lr}"]}

    with pytest.raises(InvalidInput) as caught:
        sweeps.plan(config, {"lr": [1, 2]}, None, random.Random(0))

    said = caught.value.message
    assert "{lrr}" in said and "command[3]" in said and "lr" in said


def test_a_parameter_no_placeholder_uses_is_refused() -> None:
    with pytest.raises(InvalidInput, match="'batch' is used by no placeholder"):
        sweeps.plan(command_using(["lr"]), {"lr": [1], "batch": [2]}, None, random.Random(0))


def test_the_params_variable_is_the_sweeps_own() -> None:
    config = {**command_using(["lr"]), "env": {sweeps.PARAMS_ENV: "{}"}}
    with pytest.raises(InvalidInput, match="the sweep's to set"):
        sweeps.plan(config, {"lr": [1]}, None, random.Random(0))


def test_a_huge_config_times_its_points_is_refused() -> None:
    config = {**command_using(["lr"]), "blob": "x" * 100_000}
    with pytest.raises(InvalidInput, match="smaller config"):
        sweeps.plan(config, {"lr": list(range(1000))}, None, random.Random(0))


def test_samples_and_max_parallel_are_bounded() -> None:
    grid = sweeps.check_grid({"lr": [1, 2]})
    for bad in (0, -1, 1001, True):
        with pytest.raises(InvalidInput):
            sweeps.choose(grid, bad, random.Random(0))
        with pytest.raises(InvalidInput):
            sweeps.check_max_parallel(bad)
    assert sweeps.check_max_parallel(3) == 3


@given(st.integers(0, 50), st.one_of(st.none(), st.integers(1, 50)))
def test_a_sweep_has_room_while_fewer_than_max_parallel_run(running: int, most: int | None) -> None:
    assert sweeps.has_room(running, most) == (most is None or running < most)


@given(st.lists(st.sampled_from(list(JobStatus)), max_size=8))
def test_a_sweep_runs_while_any_job_runs_and_has_ended_only_once_all_did(
    statuses: list[JobStatus],
) -> None:
    status = sweeps.status_of(statuses)
    placed = {JobStatus.OFFERED, JobStatus.RUNNING} & set(statuses)
    waiting = {JobStatus.QUEUED, JobStatus.PENDING_APPROVAL} & set(statuses)
    if placed:
        assert status == "running"
    elif waiting or not statuses:
        assert status == "queued"
    else:
        assert status in {"completed", "failed", "cancelled"}
        assert (status == "completed") == all(s is JobStatus.COMPLETED for s in statuses)
