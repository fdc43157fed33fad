"""The input policy: what it refuses, and that what it repairs it would accept (#14)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from gpufleet.domain import jsonpolicy
from gpufleet.domain.jsonpolicy import (
    MAX_DEPTH,
    first_problem,
    loads_stored,
    more_values_than,
    problems,
    readable,
)
from gpufleet.worker.client import encode
from tests.nasty import nested, values


@pytest.mark.parametrize(
    ("value", "loc", "words"),
    [
        ({"a": "x\x00"}, ("a",), "NUL"),
        ({"a": ["\ud800"]}, ("a", 0), "lone surrogate"),
        ({"a\x00": 1}, (), "key that contains a NUL"),
        ({"n": 2**63}, ("n",), "outside -2^63"),
        ({"n": -(2**63) - 1}, ("n",), "outside -2^63"),
        ({"f": math.nan}, ("f",), "NaN or Infinity"),
        ({"f": -math.inf}, ("f",), "NaN or Infinity"),
        (nested(MAX_DEPTH + 1), ("a", 0) * (MAX_DEPTH // 2), "nested more than 32"),
    ],
)
def test_each_unstorable_value_is_named_by_its_place(value: Any, loc: tuple[Any, ...], words: str):
    found = first_problem(value)
    assert found is not None and words in found.msg
    assert found.loc == loc


@pytest.mark.parametrize(
    "value", [{}, [], None, 2**63 - 1, -(2**63), 1e308, -0.0, "ok \u202e ☃", nested(MAX_DEPTH)]
)
def test_ordinary_values_up_to_the_limits_pass(value: Any):
    assert first_problem(value) is None


@settings(max_examples=300)
@given(value=values)
def test_a_repaired_value_is_one_the_policy_accepts(value: Any):
    assert first_problem(readable(value)) is None


@settings(max_examples=300)
@given(value=values)
def test_a_stored_value_reads_back_as_one_every_encoder_writes(value: Any):
    text = json.dumps({"v": value})  # as SQLAlchemy's JSON column writes it
    back = loads_stored(text)
    # Left as stored, since every encoder writes them: NUL (only PostgreSQL could not store
    # it) and integers up to 2^64 (orjson's and pydantic's range)
    left = [p.msg for p in problems(back) if "NUL" not in p.msg and "integer" not in p.msg]
    assert left == []
    orjson.dumps(back)  # the event streams' encoder
    TypeAdapter(Any).dump_json(back)  # FastAPI's
    if first_problem(json.loads(text)) is None:  # a value the policy takes is read as it was
        assert back == json.loads(text)


@settings(max_examples=300)
@given(value=values)
def test_whatever_a_job_writes_the_worker_sends_what_the_orchestrator_takes(value: Any):
    """Output, progress and errors come from the job: the worker's one encoder makes them
    storable, so a report is never refused for what the job printed."""
    sent = json.loads(encode({"status": "running", "progress": {"metrics": {"m": value}}}))
    assert first_problem(sent) is None
    assert "\x00" not in json.dumps(sent, ensure_ascii=False)


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(_count, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(_count, value))
    return 1


@settings(max_examples=300)
@given(value=values, indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_a_body_s_values_are_counted_before_parsing_as_parsing_would_count_them(
    value: Any, indent: int | None, ascii_only: bool
):
    body = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode(errors="surrogatepass")
    held = _count(value)
    assert more_values_than(body, held - 1)
    assert not more_values_than(body, held)


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ('["a,b", "[{", "\\\\", "\\"],{"]', 5),  # commas, brackets and escapes in strings
        ("[ [ ] , { } , [\n] ]", 4),  # empty containers, spaced
        ('{"k,[": {"x": [1, 2]}}', 5),  # keys are not values
        ("[" + ",".join(["0"] * 200_000) + "]", 200_001),
    ],
)
def test_counting_skips_strings_and_counts_empty_containers_once(text: str, held: int):
    assert more_values_than(text.encode(), held - 1)
    assert not more_values_than(text.encode(), held)


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_a_body_counted_a_window_at_a_time_is_counted_alike_whatever_the_window(
    window: int, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(jsonpolicy, "WINDOW", window)
    bodies = [
        '["a,b", "[{", [], {"k": [ ]}, ",", [ "x" ], {"[": {}}]',
        '{"k,[": {"x": [1, 2, [[]], {"": ""}]}, "e": [\n]}',
        '[[], [[], []], "", "" , [""]]',
    ]
    for text in bodies:
        held = _count(json.loads(text))
        assert jsonpolicy.more_values_than(text.encode(), held - 1, lambda: None), text
        assert not jsonpolicy.more_values_than(text.encode(), held, lambda: None), text
