"""What a queued job waits for, said to each surface in its own terms (#15.7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.advice import Surface, say_wait
from gpufleet.domain.matching import Capacity, Requirement, WaitCode, never_runs, why_waiting
from gpufleet.domain.states import Target, WorkerStatus


def local_runner(gpus: int) -> Capacity:
    return Capacity("w_local", "local", WorkerStatus.IDLE, gpus, {}, is_local=True)


def test_an_empty_fleet_is_told_to_create_a_worker_in_each_surfaces_terms() -> None:
    wait = why_waiting(Requirement(target=Target.WORKER, gpu_count=1, labels={}), [])

    assert wait.code is WaitCode.NO_WORKER_MATCHES
    assert "POST /api/admin/workers" in say_wait(wait, Surface.API)
    assert "Create Worker on the Workers page" in say_wait(wait, Surface.UI)
    assert "`gpufleet workers create NAME" in say_wait(wait, Surface.CLI)


@pytest.mark.parametrize("local_gpus", [0, 1])
def test_a_local_job_wanting_more_gpus_than_the_local_runner_is_told_what_it_has(
    local_gpus: int,
) -> None:
    req = Requirement(target=Target.LOCAL, gpu_count=2, labels={})
    wait = why_waiting(req, [local_runner(local_gpus)])

    assert wait.code is WaitCode.LOCAL_TOO_SMALL
    has = "no GPU" if local_gpus == 0 else "1 GPU"
    most = "0" if local_gpus == 0 else f"{local_gpus} or less"  # never "0 or less" (#33.7)
    assert say_wait(wait, Surface.UI) == (
        f"the local runner has {has} and the job needs 2 GPUs: submit again from Train with "
        f"GPU count {most}, or with target Worker or Auto"
    )
    assert f"--gpus {most}," in say_wait(wait, Surface.CLI)
    for surface in Surface:
        assert "create" not in say_wait(wait, surface).lower()


@pytest.mark.parametrize(
    ("target", "local_gpus", "wanted", "refused"),
    [
        (Target.LOCAL, 0, 2, True),
        (Target.LOCAL, 1, 2, True),
        (Target.LOCAL, 2, 2, False),
        (Target.LOCAL, None, 2, False),  # not registered yet: its GPUs are not known
        (Target.AUTO, 0, 2, False),  # a worker may come for it
        (Target.WORKER, 0, 2, False),
    ],
)
def test_only_a_local_job_wanting_more_gpus_than_the_local_runner_never_runs(
    target: Target, local_gpus: int | None, wanted: int, refused: bool
) -> None:
    req = Requirement(target=target, gpu_count=wanted, labels={})
    local = Capacity("w_local", "local", WorkerStatus.IDLE, local_gpus, {}, is_local=True)
    wait = never_runs(req, local)
    assert (wait is not None) == refused
    if wait is not None:
        assert wait.code is WaitCode.LOCAL_TOO_SMALL
        assert wait.params["local_gpus"] == local_gpus


def test_a_local_job_with_labels_the_local_runner_lacks_is_not_told_to_create_a_worker() -> None:
    req = Requirement(target=Target.LOCAL, gpu_count=0, labels={"zone": "eu"})
    wait = why_waiting(req, [local_runner(0)])

    assert "without the --label the local runner lacks" in say_wait(wait, Surface.CLI)
    assert "Create Worker" not in say_wait(wait, Surface.UI)


statuses = st.sampled_from(list(WorkerStatus))
fleets = st.lists(
    st.builds(
        Capacity,
        worker_id=st.sampled_from(["w_1", "w_2", "w_local"]),
        name=st.sampled_from(["gpu-1", "local"]),
        status=statuses,
        gpu_count=st.none() | st.integers(0, 4),
        labels=st.dictionaries(st.sampled_from(["zone"]), st.sampled_from(["eu", "us"])),
        is_local=st.booleans(),
    ),
    max_size=3,
)
requirements = st.builds(
    Requirement,
    target=st.sampled_from(list(Target)),
    gpu_count=st.integers(0, 4),
    labels=st.dictionaries(st.sampled_from(["zone"]), st.sampled_from(["eu", "u*"])),
)


@given(req=requirements, caps=fleets)
def test_only_the_api_ever_names_an_endpoint_or_a_field(req: Requirement, caps: list) -> None:
    wait = why_waiting(req, caps)
    assert "/api/" not in say_wait(wait, Surface.UI)
    assert "/api/" not in say_wait(wait, Surface.CLI)
    assert "gpu_count" not in say_wait(wait, Surface.UI) + say_wait(wait, Surface.CLI)
