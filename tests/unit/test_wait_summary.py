"""The one line that says what a queued job waits for (`waiting.summary` of a job)."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from gpufleet.domain.advice import Surface, say_wait
from gpufleet.domain.matching import Capacity, Requirement, fits, why_waiting
from gpufleet.domain.states import Target, WorkerStatus

KEYS = ["gpu", "zone", "team"]
VALUES = ["a100", "h100", "us-east", "nlp"]

requirements = st.builds(
    Requirement,
    target=st.sampled_from(list(Target)),
    gpu_count=st.integers(0, 8),
    labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from([*VALUES, "a1*"]), max_size=2),
)
capacities = st.builds(
    Capacity,
    worker_id=st.sampled_from(["w_1", "w_2", "w_3"]),
    name=st.sampled_from(["gpu-1", "spot-1", "local"]),
    status=st.sampled_from(list(WorkerStatus)),
    gpu_count=st.none() | st.integers(0, 8),
    labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
    is_local=st.booleans(),
)


def wait_summary(req: Requirement, caps: list[Capacity]) -> str:
    """The line the API answers as a queued job's `waiting.summary` (services/queue.py)."""
    return say_wait(why_waiting(req, caps), Surface.API)


@given(req=requirements, caps=st.lists(capacities, max_size=4))
def test_while_no_registered_worker_fits_the_summary_names_every_label_and_the_gpus(req, caps):
    assume(not any(fits(req, c) and c.gpu_count is not None for c in caps))
    summary = wait_summary(req, caps)
    assert summary.startswith(("no ", "the local runner has "))
    for key, pattern in req.labels.items():
        assert f"{key}={pattern}" in summary
    if req.gpu_count:
        assert f"{req.gpu_count} GPU" in summary


def test_an_empty_fleet_says_to_create_a_worker_that_matches():
    req = Requirement(target=Target.WORKER, gpu_count=2, labels={"team": "nlp"})
    assert wait_summary(req, []) == (
        "no remote worker registered has 2 GPUs and team=nlp; it waits until one does: create "
        "and start a worker that matches (POST /api/admin/workers), or relax gpu_count / "
        "worker_labels"
    )


def test_a_job_asking_nothing_of_an_empty_fleet_waits_for_any_worker():
    req = Requirement(target=Target.AUTO, gpu_count=0, labels={})
    assert wait_summary(req, []).startswith("no worker is registered; it waits until one does")


def test_unregistered_workers_that_may_fit_are_named_up_to_three():
    req = Requirement(target=Target.WORKER, gpu_count=1, labels={})
    caps = [
        Capacity(f"w_{n}", f"spot-{n}", WorkerStatus.CONNECTING, None, {}, is_local=False)
        for n in range(5)
    ]
    assert wait_summary(req, caps) == (
        "no remote worker registered has 1 GPU; spot-0, spot-1, spot-2 and 2 more may, once "
        "they register (their GPUs are not known yet)"
    )


def test_an_idle_worker_that_fits_means_the_job_is_about_to_be_offered():
    req = Requirement(target=Target.WORKER, gpu_count=1, labels={})
    idle = Capacity("w_1", "gpu-1", WorkerStatus.IDLE, 1, {}, is_local=False)
    assert wait_summary(req, [idle]) == "a worker can run it now: it is about to be offered"
