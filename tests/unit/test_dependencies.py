"""Jobs that run after others: `dependencies.decide` property-tested, and the checks of a
submit's `depends_on` and `inputs`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.dependencies import (
    MAX_DEPENDENCIES,
    Dependency,
    Doomed,
    On,
    Satisfied,
    Upstream,
    Waiting,
    check,
    decide,
    satisfies,
    selected,
)
from gpufleet.domain.states import TERMINAL_JOB, JobStatus
from gpufleet.errors import InvalidInput
from gpufleet.worker.inputs import from_offer as inputs_of
from gpufleet.worker.resume import ResumeFailed

J = JobStatus
upstreams = st.lists(
    st.builds(
        Upstream,
        job_id=st.sampled_from([f"j_{n}" for n in range(6)]),
        on=st.sampled_from(list(On)),
        status=st.sampled_from(list(JobStatus)),
    ),
    max_size=8,
)


@given(upstreams)
def test_a_job_runs_only_when_every_dependency_is_met(ups: list[Upstream]) -> None:
    met = [satisfies(u.on, u.status) for u in ups]
    decision = decide(ups)
    assert isinstance(decision, Satisfied) == all(m is True for m in met)


@given(upstreams)
def test_a_dependency_that_can_never_be_met_dooms_the_job_and_is_named(
    ups: list[Upstream],
) -> None:
    decision = decide(ups)
    never = [u for u in ups if satisfies(u.on, u.status) is False]
    if never:
        assert decision == Doomed(never[0].job_id, never[0].status)
        assert never[0].job_id in decision.reason
    else:
        assert not isinstance(decision, Doomed)


@given(upstreams)
def test_a_waiting_job_names_the_first_dependency_not_ended(ups: list[Upstream]) -> None:
    decision = decide(ups)
    if isinstance(decision, Waiting):
        first = next(u for u in ups if u.status not in TERMINAL_JOB)
        assert decision.job_id == first.job_id


@given(st.sampled_from(list(JobStatus)))
def test_on_ended_is_met_by_any_end_and_on_completed_only_by_completion(
    status: JobStatus,
) -> None:
    ended = status in TERMINAL_JOB
    assert satisfies(On.ENDED, status) is (True if ended else None)
    expected = (status is J.COMPLETED) if ended else None
    assert satisfies(On.COMPLETED, status) is expected


def test_dependencies_are_parsed_from_ids_and_entries() -> None:
    deps, inputs = check(["j_a", {"job": "j_b", "on": "ended"}], {"j_a": ["output/**"]})
    assert deps == (Dependency("j_a"), Dependency("j_b", On.ENDED))
    assert inputs == {"j_a": ("output/**",)}


@pytest.mark.parametrize(
    ("depends_on", "inputs", "said"),
    [
        (["j_a", "j_a"], {}, "twice"),
        (["nope"], {}, "not a job id"),
        (["j_a/../b"], {}, "not a job id"),
        ([{"job": "j_a", "on": "failed"}], {}, "'on'"),
        ([{"job": "j_a", "extra": 1}], {}, "must be a job id"),
        ([{"on": "ended"}], {}, "must be a job id"),
        ([f"j_{n}" for n in range(MAX_DEPENDENCIES + 1)], {}, "over the limit"),
        (["j_a"], {"j_b": ["output/**"]}, "not in depends_on"),
        (["j_a"], {"j_a": []}, "patterns"),
        (["j_a"], {"j_a": ["/etc/passwd"]}, "absolute"),
        (["j_a"], {"j_a": ["output/../../x"]}, "'..'"),
        (["j_a"], {"j_a": ["output//x"]}, "empty"),
        (["j_a"], {"j_a": ["out\nput"]}, "control"),
    ],
)
def test_garbage_dependencies_are_refused_saying_why(
    depends_on: list[object], inputs: dict[str, list[str]], said: str
) -> None:
    with pytest.raises(InvalidInput, match=said):
        check(depends_on, inputs)  # type: ignore[arg-type]


def test_input_globs_match_within_a_name_or_across_folders() -> None:
    paths = ["output/x", "output/a/b.bin", "outputs/y", "log.txt"]
    assert selected(["output/**"], paths) == ["output/x", "output/a/b.bin"]
    assert selected(["output/*"], paths) == ["output/x"]
    assert selected(["*.txt", "output/?"], paths) == ["output/x", "log.txt"]


GOOD = {"path": "inputs/j_a/output/x", "size": 3, "sha256": "0" * 64, "url": "/api/x"}


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({**GOOD, "path": "output/x"}, "not a path under inputs/"),
        ({**GOOD, "path": "inputs/../../etc/passwd"}, "not a path under inputs/"),
        ({**GOOD, "path": "/inputs/x"}, "not a path under inputs/"),
        ({**GOOD, "size": -1}, "bad size"),
        ({**GOOD, "sha256": "x"}, "bad sha256"),
        ({**GOOD, "url": ""}, "no download URL"),
        ("inputs/x", "not an object"),
    ],
)
def test_the_worker_refuses_an_offers_input_it_cannot_place_safely(
    entry: object, said: str
) -> None:
    with pytest.raises(ResumeFailed, match=said):
        inputs_of([entry])


def test_an_offer_without_inputs_has_none_and_a_good_one_is_read() -> None:
    assert inputs_of(None) == ()
    (read,) = inputs_of([GOOD])
    assert read.digest.path == "inputs/j_a/output/x" and read.url == "/api/x"
